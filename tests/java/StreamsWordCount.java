import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count with the streams rebalance protocol (KIP-1071).
 * Args: bootstrap application-id input-topic output-topic state-dir processing-guarantee
 * [replication-factor of the internal topics, else the broker's default].
 * Prints "STATE old -> new" on each state change; runs until killed.
 */
public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
        p.put("group.protocol", "streams");
        if (args.length > 6) {
            p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(args[6]));
        }
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(args[2])
            .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split("\\W+")))
            .groupBy((k, w) -> w)
            .count()
            .toStream()
            .mapValues(Object::toString)
            .to(args[3], Produced.with(Serdes.String(), Serdes.String()));
        KafkaStreams s = new KafkaStreams(b.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        s.setStateListener((n, o) -> System.out.println("STATE " + o + " -> " + n));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> { s.close(); done.countDown(); }));
        s.start();
        done.await();
    }
}
