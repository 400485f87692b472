// Kafka's Java producer at three edges where Rivulet once answered differently from Kafka 4.3.1;
// prints one normalized line per step (exception class names and messages, no ids or times).
// Run with: java -cp <kafka-clients jars> ProducerEdges.java BOOTSTRAP RUN_ID
//
// 1. acks=all (the idempotent default) to a one-replica topic with min.insync.replicas=2:
//    Kafka caps the setting at the replica count, so the send succeeds.
// 2. sendOffsetsToTransaction with a KIP-848 consumer's group metadata at a wrong member epoch:
//    Kafka answers ILLEGAL_GENERATION, an abortable CommitFailedException; the next
//    transaction works.
// 3. A keyless record to a compacted topic: the record's own message, worded as Kafka's.

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProducerEdges {
    static String bootstrap;
    static String run;

    interface Step { void run() throws Exception; }

    static void step(String name, Step s) {
        String out;
        try {
            s.run();
            out = "ok";
        } catch (Exception e) {
            Throwable t = e instanceof ExecutionException ? e.getCause() : e;
            out = t.getClass().getSimpleName() + ": " + String.valueOf(t.getMessage()).replace(run, "R");
        }
        System.out.println(name + " " + out);
        System.out.flush();
    }

    static Properties producer(String transactionalId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("delivery.timeout.ms", "10000");
        p.put("request.timeout.ms", "5000");
        if (transactionalId != null) p.put("transactional.id", transactionalId);
        return p;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        run = args[1];
        String minIsr = "min-isr-" + run, offsets = "txn-offsets-" + run, compact = "compact-" + run;
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(
                new NewTopic(minIsr, 1, (short) 1).configs(Map.of("min.insync.replicas", "2")),
                new NewTopic(offsets, 1, (short) 1),
                new NewTopic(compact, 1, (short) 1).configs(Map.of("cleanup.policy", "compact")))).all().get();
        }
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producer(null))) {
            step("acks-all-min-isr-above-replicas", () -> p.send(new ProducerRecord<>(minIsr, "v")).get());
            p.send(new ProducerRecord<>(offsets, "v")).get();
            step("keyless-to-compacted", () -> p.send(new ProducerRecord<>(compact, "v")).get());
        }

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", "g-" + run);
        cp.put("group.protocol", "consumer");
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
             KafkaProducer<String, String> p = new KafkaProducer<>(producer("tx-" + run))) {
            c.subscribe(List.of(offsets));
            long deadline = System.currentTimeMillis() + 30_000;
            int polled = 0;
            while (polled == 0 && System.currentTimeMillis() < deadline) polled += c.poll(Duration.ofMillis(200)).count();
            System.out.println("polled " + polled);
            ConsumerGroupMetadata m = c.groupMetadata();
            @SuppressWarnings("removal")
            ConsumerGroupMetadata stale = new ConsumerGroupMetadata(m.groupId(), m.generationId() + 7, m.memberId(),
                                                                    Optional.empty());
            Map<TopicPartition, OffsetAndMetadata> at1 = Map.of(new TopicPartition(offsets, 0), new OffsetAndMetadata(1));
            p.initTransactions();
            p.beginTransaction();
            step("send-offsets-stale-epoch", () -> p.sendOffsetsToTransaction(at1, stale));
            step("abort", p::abortTransaction);
            step("next-transaction", () -> {
                p.beginTransaction();
                p.sendOffsetsToTransaction(at1, c.groupMetadata());
                p.commitTransaction();
            });
            System.out.println("committed " + c.committed(at1.keySet()).get(new TopicPartition(offsets, 0)).offset());
        }
        System.exit(0);
    }
}
