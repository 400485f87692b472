// Share consumers' throughput with Kafka's Java client, for benchmarks.compare's share rows: MEMBERS
// KafkaShareConsumers (one thread each, implicit acknowledgement: each poll accepts the previous
// batch) read one group until RECORDS acknowledgements are confirmed, counted by the acknowledgement
// commit callback, as benchmarks/share_groups.py does with confluent-kafka. The clock starts before
// the first consumer is made, so the join is in the figure. Prints one line on stdout:
// "acked N seconds S first S1 batch B failed F acks A largest L empty E emptys W" (S: to the last
// confirmed acknowledgement; S1: to the first, which confirmed B records; A: commit callbacks, one per
// acknowledging round trip of a member, L the most records one confirmed; E polls that returned
// nothing between the first acknowledgement and the target, W the seconds they took, summed over the
// members), or exits 1 on TIMEOUT_S.
// Run with: java -cp <Kafka's jars> ShareAcks.java BOOTSTRAP TOPIC GROUP MEMBERS RECORDS TIMEOUT_S

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareAcks {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int members = Integer.parseInt(args[3]);
        long target = Long.parseLong(args[4]);
        long deadline = System.nanoTime() + (long) (Double.parseDouble(args[5]) * 1e9);
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong(), last = new AtomicLong();
        AtomicLong first = new AtomicLong(), firstBatch = new AtomicLong();
        AtomicLong acks = new AtomicLong(), largest = new AtomicLong(), empty = new AtomicLong(), emptyNs = new AtomicLong();
        long start = System.nanoTime();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            props.put("client.id", "share-acks-" + i);
            props.put("key.deserializer", ByteArrayDeserializer.class.getName());
            props.put("value.deserializer", ByteArrayDeserializer.class.getName());
            KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props);
            consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
                long n = offsets.values().stream().mapToLong(Set::size).sum();
                if (exception != null) {
                    failed.addAndGet(n);
                } else {
                    acks.incrementAndGet();
                    largest.accumulateAndGet(n, Math::max);
                    long now = System.nanoTime();
                    if (acked.getAndAdd(n) == 0 && first.compareAndSet(0, now)) {
                        firstBatch.set(n);
                    }
                    last.set(now);
                }
            });
            consumer.subscribe(List.of(topic));
            Thread t = new Thread(() -> {
                try (consumer) {
                    while (acked.get() < target && System.nanoTime() < deadline) {
                        long polled = System.nanoTime();
                        boolean got = !consumer.poll(Duration.ofMillis(100)).isEmpty();
                        long n = acked.get();
                        if (!got && n > 0 && n < target) { // between the first acknowledgement and the last
                            empty.incrementAndGet();
                            emptyNs.addAndGet(System.nanoTime() - polled);
                        }
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        if (acked.get() < target) {
            System.err.println(acked.get() + " of " + target + " acknowledged before the timeout (" + failed.get()
                               + " failed)");
            System.exit(1);
        }
        System.out.printf("acked %d seconds %.6f first %.6f batch %d failed %d acks %d largest %d empty %d emptys %.3f%n",
                          acked.get(), (last.get() - start) / 1e9, (first.get() - start) / 1e9, firstBatch.get(),
                          failed.get(), acks.get(), largest.get(), empty.get(), emptyNs.get() / 1e9);
    }
}
