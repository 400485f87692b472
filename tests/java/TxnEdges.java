// Kafka's Java KafkaProducer in transactions at their edges, one scenario at a time, each on its
// own topic, transactional id and group. Every line printed is normalized ("[SCENARIO] step
// result": ok, read values, offsets, or the exception chain with its messages, ids, epochs and
// long numbers masked) so one broker's output can be diffed against another's.
// Run with: java -cp <kafka-clients jars> TxnEdges.java BOOTSTRAP PREFIX [SCENARIO...]
// The broker needs transaction.abort.timed.out.transaction.cleanup.interval.ms=1000 ("timeout")
// and auto.create.topics.enable=false.

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnEdges {
    static String bootstrap;
    static String prefix;
    static String scenario;
    static Admin admin;

    interface Step { void run() throws Exception; }

    static void say(String line) {
        System.out.println("[" + scenario + "] " + line.replace(prefix, "P"));
        System.out.flush();
    }

    static String mask(String message) {
        return String.valueOf(message).replace(prefix, "P")
            .replaceAll("producerId=\\d+", "producerId=N").replaceAll("epoch=\\d+", "epoch=N")
            .replaceAll("\\d{4,}", "N");
    }

    // The whole cause chain: class names, with the message of the client's own exceptions.
    static String chain(Throwable t) {
        List<String> parts = new ArrayList<>();
        for (; t != null; t = t.getCause()) {
            boolean withMessage = t instanceof ApiException || t instanceof KafkaException || t instanceof IllegalStateException;
            parts.add(t.getClass().getSimpleName() + (withMessage ? "(" + mask(t.getMessage()) + ")" : ""));
        }
        return String.join(" <- ", parts);
    }

    static void step(String name, Step s) {
        try {
            s.run();
            say(name + " ok");
        } catch (Throwable e) {
            say(name + " -> " + chain(e));
        }
    }

    // For a step whose exception's message is not the same from run to run on Kafka itself.
    static void stepClasses(String name, Step s) {
        try {
            s.run();
            say(name + " ok");
        } catch (Throwable e) {
            say(name + " -> " + chain(e).replaceAll("\\([^<]*\\)( <- |$)", "$1"));
        }
    }

    static String topic(String name, int partitions, Map<String, String> configs) throws Exception {
        String t = prefix + "-" + name;
        admin.createTopics(List.of(new NewTopic(t, partitions, (short) 1).configs(configs))).all().get();
        return t;
    }

    static Properties producerProps(String transactionalId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        if (transactionalId != null) p.put("transactional.id", prefix + "-" + transactionalId);
        p.put("delivery.timeout.ms", "10000");
        p.put("request.timeout.ms", "5000");
        p.put("max.block.ms", "10000");
        return p;
    }

    static Properties consumerProps(String group, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        if (group != null) p.put("group.id", prefix + "-" + group);
        p.put("isolation.level", isolation);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        return p;
    }

    static void plain(String topic, int partition, String... values) throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(null))) {
            for (String v : values) p.send(new ProducerRecord<>(topic, partition, null, v)).get();
        }
    }

    // Every value of the topic's first `partitions` partitions up to their end offsets.
    static List<String> read(String topic, int partitions, String isolation) {
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(null, isolation))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            List<String> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 10000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
                boolean done = true;
                for (TopicPartition tp : tps) done &= c.position(tp) >= end.get(tp);
                if (done) break;
            }
            return got;
        }
    }

    static int pollUntil(KafkaConsumer<String, String> c, int n) {
        int got = 0;
        long deadline = System.currentTimeMillis() + 20000;
        while (got < n && System.currentTimeMillis() < deadline) got += c.poll(Duration.ofMillis(200)).count();
        return got;
    }

    // commit, abort, commit; then the calls the producer's state machine refuses.
    static void basic() throws Exception {
        String t = topic("basic", 1, Map.of());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps("basic"))) {
            step("init", p::initTransactions);
            p.beginTransaction();
            p.send(new ProducerRecord<>(t, "c1"));
            p.send(new ProducerRecord<>(t, "c2"));
            step("commit", p::commitTransaction);
            p.beginTransaction();
            p.send(new ProducerRecord<>(t, "a1")).get();
            p.send(new ProducerRecord<>(t, "a2")).get();
            step("abort", p::abortTransaction);
            p.beginTransaction();
            p.send(new ProducerRecord<>(t, "c3"));
            step("commit-again", p::commitTransaction);
            step("commit-without-begin", p::commitTransaction);
            step("send-without-begin", () -> p.send(new ProducerRecord<>(t, "x")).get());
            step("begin-twice", () -> { p.beginTransaction(); p.beginTransaction(); });
            step("abort-after-begin-twice", p::abortTransaction);
            for (int i = 0; i < 5; i++) {
                final int n = i;
                p.beginTransaction();
                p.send(new ProducerRecord<>(t, "l" + n)).get();
                if (n % 2 == 0) p.commitTransaction(); else p.abortTransaction();
            }
            say("loop done");
        }
        say("read_committed " + read(t, 1, "read_committed"));
        say("read_uncommitted " + read(t, 1, "read_uncommitted"));
    }

    // sendOffsetsToTransaction for a classic group: valid, a stale generation, an unknown member.
    static void offsets() throws Exception {
        String t = topic("offsets", 1, Map.of());
        plain(t, 0, "v0", "v1", "v2", "v3", "v4");
        TopicPartition tp = new TopicPartition(t, 0);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps("offsets", "read_committed"));
             KafkaProducer<String, String> p = new KafkaProducer<>(producerProps("offsets"))) {
            c.subscribe(List.of(t));
            say("polled " + pollUntil(c, 5) + " generation>0 " + (c.groupMetadata().generationId() > 0));
            p.initTransactions();
            p.beginTransaction();
            step("sendOffsets", () -> p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(3)), c.groupMetadata()));
            step("commit", p::commitTransaction);
            say("committed " + c.committed(Set.of(tp)).get(tp).offset());
            ConsumerGroupMetadata m = c.groupMetadata();
            p.beginTransaction();
            ConsumerGroupMetadata stale = new ConsumerGroupMetadata(m.groupId(), m.generationId() + 7, m.memberId(), m.groupInstanceId());
            step("sendOffsets-stale-generation", () -> p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(4)), stale));
            step("commit-after-stale", p::commitTransaction);
            step("abort-after-stale", p::abortTransaction);
            step("begin", p::beginTransaction);
            ConsumerGroupMetadata nobody = new ConsumerGroupMetadata(m.groupId(), m.generationId(), "nobody", Optional.empty());
            step("sendOffsets-unknown-member", () -> p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(4)), nobody));
            step("commit-after-unknown-member", p::commitTransaction);
            step("abort-after-unknown-member", p::abortTransaction);
            say("committed-after " + c.committed(Set.of(tp)).get(tp).offset());
        }
    }

    // sendOffsetsToTransaction for a KIP-848 (group.protocol=consumer) group and a simple group.
    static void offsets848() throws Exception {
        String t = topic("offsets848", 2, Map.of());
        plain(t, 0, "v0", "v2", "v4");
        plain(t, 1, "v1", "v3", "v5");
        TopicPartition p0 = new TopicPartition(t, 0), p1 = new TopicPartition(t, 1);
        Properties cp = consumerProps("offsets848", "read_committed");
        cp.put("group.protocol", "consumer");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
             KafkaProducer<String, String> p = new KafkaProducer<>(producerProps("offsets848"))) {
            c.subscribe(List.of(t));
            int n = pollUntil(c, 6);
            ConsumerGroupMetadata m = c.groupMetadata();
            say("polled " + n + " generation>0 " + (m.generationId() > 0) + " member " + !m.memberId().isEmpty());
            p.initTransactions();
            p.beginTransaction();
            step("sendOffsets", () -> p.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(2), p1, new OffsetAndMetadata(1)), c.groupMetadata()));
            step("commit", p::commitTransaction);
            Map<TopicPartition, OffsetAndMetadata> cm = c.committed(Set.of(p0, p1));
            say("committed " + cm.get(p0).offset() + "," + cm.get(p1).offset());
            p.beginTransaction();
            ConsumerGroupMetadata newer = new ConsumerGroupMetadata(m.groupId(), m.generationId() + 7, m.memberId(), m.groupInstanceId());
            step("sendOffsets-newer-epoch", () -> p.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(3)), newer));
            step("commit-after-newer", p::commitTransaction);
            step("abort-after-newer", p::abortTransaction);
            step("begin", p::beginTransaction);
            ConsumerGroupMetadata older = new ConsumerGroupMetadata(m.groupId(), m.generationId() - 1, m.memberId(), m.groupInstanceId());
            step("sendOffsets-older-epoch", () -> p.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(3)), older));
            step("commit-after-older", p::commitTransaction);
            step("abort-after-older", p::abortTransaction);
            step("begin2", p::beginTransaction);
            ConsumerGroupMetadata nobody = new ConsumerGroupMetadata(m.groupId(), m.generationId(), "nobody", Optional.empty());
            step("sendOffsets-unknown-member", () -> p.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(3)), nobody));
            step("commit-after-unknown-member", p::commitTransaction);
            step("abort-after-unknown-member", p::abortTransaction);
            String simpleGroup = prefix + "-simple";
            step("begin3", p::beginTransaction);
            step("sendOffsets-simple-group", () -> p.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(5)), new ConsumerGroupMetadata(simpleGroup)));
            step("commit-simple", p::commitTransaction);
            step("begin4", p::beginTransaction);
            ConsumerGroupMetadata stranger = new ConsumerGroupMetadata(simpleGroup, 3, "someone", Optional.empty());
            step("sendOffsets-simple-group-with-member", () -> p.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(6)), stranger));
            step("commit-simple-with-member", p::commitTransaction);
            step("abort-simple-with-member", p::abortTransaction);
            cm = c.committed(Set.of(p0, p1));
            say("committed-after " + cm.get(p0).offset() + "," + cm.get(p1).offset());
        }
        Map<TopicPartition, OffsetAndMetadata> simple = admin.listConsumerGroupOffsets(prefix + "-simple")
            .partitionsToOffsetAndMetadata().get();
        say("simple-group " + simple.get(p0).offset());
    }

    // A second producer with the same transactional id fences the first, mid-transaction.
    static void fence() throws Exception {
        String t = topic("fence", 1, Map.of());
        KafkaProducer<String, String> a = new KafkaProducer<>(producerProps("fence"));
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(t, "a1")).get();
        KafkaProducer<String, String> b = new KafkaProducer<>(producerProps("fence"));
        step("b-init", b::initTransactions);
        step("a-send", () -> a.send(new ProducerRecord<>(t, "a2")).get());
        // Kafka words it as its Produce answer or as the producer's own, as the fenced batch and
        // the commit happen to meet.
        stepClasses("a-commit", a::commitTransaction);
        step("a-abort", a::abortTransaction);
        step("b-transaction", () -> { b.beginTransaction(); b.send(new ProducerRecord<>(t, "b1")).get(); b.commitTransaction(); });
        a.close(Duration.ofSeconds(2));
        b.close();
        say("read_committed " + read(t, 1, "read_committed"));
        // The fenced producer's first call after the other's init is the commit.
        KafkaProducer<String, String> c = new KafkaProducer<>(producerProps("fence2"));
        c.initTransactions();
        c.beginTransaction();
        c.send(new ProducerRecord<>(t, "c1")).get();
        KafkaProducer<String, String> d = new KafkaProducer<>(producerProps("fence2"));
        d.initTransactions();
        step("c-commit", c::commitTransaction);
        step("d-transaction", () -> { d.beginTransaction(); d.send(new ProducerRecord<>(t, "d1")).get(); d.commitTransaction(); });
        c.close(Duration.ofSeconds(2));
        d.close();
        say("read_committed " + read(t, 1, "read_committed"));
    }

    // transaction.timeout.ms expires mid-transaction: the coordinator aborts it.
    static void timeout() throws Exception {
        String t = topic("timeout", 1, Map.of());
        Properties props = producerProps("timeout");
        props.put("transaction.timeout.ms", "2000");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(props)) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(t, "t1")).get();
            Thread.sleep(6000);
            step("send-after-timeout", () -> p.send(new ProducerRecord<>(t, "t2")).get());
            stepClasses("commit-after-timeout", p::commitTransaction);  // worded either way, as a-commit
            step("abort-after-timeout", p::abortTransaction);
            step("next-transaction", () -> { p.beginTransaction(); p.send(new ProducerRecord<>(t, "t3")).get(); p.commitTransaction(); });
        }
        say("read_committed " + read(t, 1, "read_committed"));
        Properties big = producerProps("bigtimeout");
        big.put("transaction.timeout.ms", "900001");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(big)) {
            step("init-timeout-above-max", p::initTransactions);
        }
    }

    // A batch the broker refuses (over the topic's max.message.bytes) makes the transaction abortable.
    static void failedSend() throws Exception {
        String t = topic("failedsend", 1, Map.of("max.message.bytes", "1000"));
        Properties props = producerProps("failedsend");
        // The producer splits the refused batch and sends it again until it expires: each split
        // deepens its Future.get()'s recursion, as many as the broker answers in the time.
        props.put("delivery.timeout.ms", "4000");
        props.put("request.timeout.ms", "3000");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(props)) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(t, "ok1"));
            step("send-too-large", () -> p.send(new ProducerRecord<>(t, "x".repeat(3000))).get());
            // The send's future can fail before the producer has taken its error state in (the
            // split batch's futures are chained): give it that, so the commit meets the state.
            Thread.sleep(1000);
            step("commit-after-failed-send", p::commitTransaction);
            step("abort", p::abortTransaction);
            step("next-transaction", () -> { p.beginTransaction(); p.send(new ProducerRecord<>(t, "ok2")).get(); p.commitTransaction(); });
        }
        say("read_committed " + read(t, 1, "read_committed"));
    }

    // An open transaction holds back read_committed's end offset (the LSO), not read_uncommitted's.
    static void lso() throws Exception {
        String t = topic("lso", 2, Map.of());
        TopicPartition p0 = new TopicPartition(t, 0), p1 = new TopicPartition(t, 1);
        plain(t, 0, "p0", "p1", "p2");
        KafkaProducer<String, String> p = new KafkaProducer<>(producerProps("lso"));
        p.initTransactions();
        p.beginTransaction();
        for (int i = 0; i < 4; i++) p.send(new ProducerRecord<>(t, 0, null, "o" + i)).get();
        plain(t, 0, "after");
        plain(t, 1, "q");
        try (KafkaConsumer<String, String> rc = new KafkaConsumer<>(consumerProps(null, "read_committed"));
             KafkaConsumer<String, String> ru = new KafkaConsumer<>(consumerProps(null, "read_uncommitted"))) {
            Map<TopicPartition, Long> rcEnd = rc.endOffsets(List.of(p0, p1)), ruEnd = ru.endOffsets(List.of(p0, p1));
            say("rc-end " + rcEnd.get(p0) + " " + rcEnd.get(p1));
            say("ru-end " + ruEnd.get(p0) + " " + ruEnd.get(p1));
            rc.assign(List.of(p0, p1));
            rc.seekToEnd(List.of(p0, p1));
            say("rc-seekToEnd " + rc.position(p0) + " " + rc.position(p1));
            ru.assign(List.of(p0));
            ru.seekToEnd(List.of(p0));
            say("ru-seekToEnd " + ru.position(p0));
            rc.seekToBeginning(List.of(p0));
            List<String> got = new ArrayList<>();
            for (int i = 0; i < 10; i++) for (ConsumerRecord<String, String> r : rc.poll(Duration.ofMillis(200))) if (r.partition() == 0) got.add(r.value());
            say("rc-read-open " + got + " position " + rc.position(p0));
            OffsetAndTimestamp first = rc.offsetsForTimes(Map.of(p0, 0L)).get(p0);
            say("rc-offsetsForTimes0 " + (first == null ? null : first.offset()));
            p.commitTransaction();
            // Not the end offset right after the commit: the markers are written after EndTxn's
            // answer, on Kafka too, so whether the LSO has moved yet is a race.
            got.clear();
            for (int i = 0; i < 10; i++) for (ConsumerRecord<String, String> r : rc.poll(Duration.ofMillis(200))) if (r.partition() == 0) got.add(r.value());
            say("rc-read-after-commit " + got + " position " + rc.position(p0));
            say("rc-end-after-commit " + rc.endOffsets(List.of(p0)).get(p0));
        }
        p.close();
    }

    // init twice, a restart over an open transaction, empty transactions, flush, bad configs.
    static void lifecycle() throws Exception {
        String t = topic("lifecycle", 1, Map.of());
        KafkaProducer<String, String> a = new KafkaProducer<>(producerProps("lifecycle"));
        a.initTransactions();
        step("init-twice", a::initTransactions);
        a.beginTransaction();
        a.send(new ProducerRecord<>(t, "open")).get();
        a.close(Duration.ZERO);
        try (KafkaProducer<String, String> b = new KafkaProducer<>(producerProps("lifecycle"))) {
            step("init-over-open-transaction", b::initTransactions);
            step("transaction", () -> { b.beginTransaction(); b.send(new ProducerRecord<>(t, "b")).get(); b.commitTransaction(); });
            step("empty-commit", () -> { b.beginTransaction(); b.commitTransaction(); });
            step("empty-abort", () -> { b.beginTransaction(); b.abortTransaction(); });
            step("flush-in-transaction", () -> { b.beginTransaction(); b.send(new ProducerRecord<>(t, "c")); b.flush(); b.commitTransaction(); });
        }
        try (KafkaProducer<String, String> r = new KafkaProducer<>(producerProps("lifecycle"))) {
            step("restart-init", r::initTransactions);
            step("restart-transaction", () -> { r.beginTransaction(); r.send(new ProducerRecord<>(t, "d")).get(); r.commitTransaction(); });
        }
        say("read_committed " + read(t, 1, "read_committed") + " read_uncommitted " + read(t, 1, "read_uncommitted"));
        Properties noIdempotence = producerProps("noidempotence");
        noIdempotence.put("enable.idempotence", "false");
        step("transactional-without-idempotence", () -> new KafkaProducer<String, String>(noIdempotence).close());
        Properties empty = producerProps(null);
        empty.put("transactional.id", "");
        step("empty-transactional-id", () -> { try (KafkaProducer<String, String> e = new KafkaProducer<>(empty)) { e.initTransactions(); } });
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        Map<String, Step> all = new LinkedHashMap<>();
        all.put("basic", TxnEdges::basic);
        all.put("offsets", TxnEdges::offsets);
        all.put("offsets848", TxnEdges::offsets848);
        all.put("fence", TxnEdges::fence);
        all.put("timeout", TxnEdges::timeout);
        all.put("failedsend", TxnEdges::failedSend);
        all.put("lso", TxnEdges::lso);
        all.put("lifecycle", TxnEdges::lifecycle);
        List<String> only = List.of(args).subList(2, args.length);
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        admin = Admin.create(ap);
        for (Map.Entry<String, Step> e : all.entrySet()) {
            if (!only.isEmpty() && !only.contains(e.getKey())) continue;
            scenario = e.getKey();
            try {
                e.getValue().run();
            } catch (Throwable t) {
                say("UNCAUGHT " + chain(t));
            }
        }
        admin.close();
        System.exit(0);
    }
}
