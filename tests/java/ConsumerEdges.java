// Kafka's Java KafkaConsumer at its edges, scenario by scenario, with group.protocol=classic and
// consumer (KIP-848); one normalized line per observation: offsets, callbacks, exception
// classes and messages, never ids or times. The golden is its output against Kafka 4.3.1.
// Run with: java -cp <kafka-clients jars> ConsumerEdges.java BOOTSTRAP RUN_ID [scenario...]
// Lines start with "[scenario-protocol]"; anything else on stdout is the client's own logging.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.regex.Pattern;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumerEdges {
    static String bootstrap, run, scope;
    static Admin admin;

    interface Step { void run() throws Exception; }

    static String norm(String s) {
        // Timeouts report the time they waited, give or take a millisecond.
        return String.valueOf(s).replace(run, "R").replaceAll("\\d{5,}", "N").replaceAll(" in \\d+ms", " in Tms");
    }

    static void say(String s) {
        System.out.println("[" + scope + "] " + norm(s));
        System.out.flush();
    }

    static String ex(Throwable t) {
        if (t instanceof ExecutionException && t.getCause() != null) t = t.getCause();
        // The KIP-848 consumer's commitSync times out in one of two words, depending on which
        // of its threads notices first (seen on both brokers).
        String m = String.valueOf(t.getMessage());
        if (t instanceof org.apache.kafka.common.errors.TimeoutException
                && (m.equals("java.util.concurrent.TimeoutException") || m.matches("OffsetCommit request for offsets .* could not complete before timeout expired\\.")))
            return "TimeoutException: (commit timed out)";
        String out = t.getClass().getSimpleName() + ": " + t.getMessage();
        if (t.getCause() != null && t.getCause() != t) out += " <- " + t.getCause().getClass().getSimpleName();
        return out;
    }

    static void attempt(String what, Step s) {
        try {
            s.run();
            say(what + " ok");
        } catch (Throwable e) {
            say(what + " -> " + ex(e));
        }
    }

    static String topic(String name, int partitions) throws Exception {
        String t = "ce-" + run + "-" + name;
        admin.createTopics(List.of(new NewTopic(t, partitions, (short) 1))).all().get();
        // Kafka answers CreateTopics before every part of the broker has the topic; a
        // Metadata answer that lists it means the group coordinator can assign it too.
        for (long dl = System.currentTimeMillis() + 10000; System.currentTimeMillis() < dl; Thread.sleep(50)) {
            try {
                admin.describeTopics(List.of(t)).allTopicNames().get();
                break;
            } catch (ExecutionException e) {
                // not known yet
            }
        }
        return t;
    }

    static void produce(String topic, int partition, long firstTs, String... values) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "50");
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
            long ts = firstTs;
            for (String v : values) pr.send(new ProducerRecord<>(topic, partition, firstTs < 0 ? null : ts++ * 1000, null, v));
            pr.flush();
        }
    }

    static Properties consumer(String proto, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("group.protocol", proto);
        if (group != null) p.put("group.id", "g-" + run + "-" + group + "-" + proto);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        return p;
    }

    static TopicPartition tp(String topic, int p) { return new TopicPartition(topic, p); }

    static String parts(Collection<TopicPartition> ps) {
        TreeSet<String> s = new TreeSet<>();
        for (TopicPartition p : ps) s.add(p.topic().replace("ce-" + run + "-", "") + "-" + p.partition());
        return s.toString();
    }

    static String oam(OffsetAndMetadata m) {
        return m == null ? "null" : m.offset() + "/'" + m.metadata() + "'/" + m.leaderEpoch();
    }

    static <V> String byPartition(Map<TopicPartition, V> m, java.util.function.Function<V, String> f) {
        TreeMap<String, String> s = new TreeMap<>();
        for (var e : m.entrySet()) s.put(parts(List.of(e.getKey())).replaceAll("[\\[\\]]", ""), f.apply(e.getValue()));
        return s.toString();
    }

    static List<String> pollUntil(KafkaConsumer<String, String> c, int n, long ms) {
        List<String> got = new ArrayList<>();
        long dl = System.currentTimeMillis() + ms;
        while (got.size() < n && System.currentTimeMillis() < dl)
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) got.add(r.partition() + ":" + r.offset() + ":" + r.value());
        return got;
    }

    static void awaitAssigned(KafkaConsumer<String, String> c, int n, long ms) {
        long dl = System.currentTimeMillis() + ms;
        while (c.assignment().size() != n && System.currentTimeMillis() < dl) c.poll(Duration.ofMillis(100));
    }

    static ConsumerRebalanceListener recorder(List<String> events) {
        return new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> ps) { events.add("revoked" + parts(ps)); }
            // A KIP-848 consumer reconciles an empty assignment first when the assignment names a
            // topic id its metadata does not have yet: a race on both brokers, so left out.
            public void onPartitionsAssigned(Collection<TopicPartition> ps) { if (!ps.isEmpty()) events.add("assigned" + parts(ps)); }
            public void onPartitionsLost(Collection<TopicPartition> ps) { events.add("lost" + parts(ps)); }
        };
    }

    // assign/seek/position/committed (metadata, leader epoch), currentLag, record leader epochs.
    static void positions(String proto) throws Exception {
        String t = topic("pos-" + proto, 2);
        produce(t, 0, 1, "a", "b", "c");
        TopicPartition p0 = tp(t, 0), p1 = tp(t, 1);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "pos"))) {
            c.assign(List.of(p0, p1));
            say("assignment " + parts(c.assignment()) + " lag-before-fetch " + c.currentLag(p0));
            say("position " + c.position(p0) + " " + c.position(p1));
            c.seekToEnd(List.of(p0));
            say("seekToEnd " + c.position(p0));
            c.seekToBeginning(List.of(p0));
            say("seekToBeginning " + c.position(p0));
            c.seek(p0, 1);
            List<String> got = new ArrayList<>();
            Optional<Integer> epoch = Optional.empty();
            long dl = System.currentTimeMillis() + 10000;
            while (got.size() < 2 && System.currentTimeMillis() < dl)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) { got.add(r.offset() + ":" + r.value()); epoch = r.leaderEpoch(); }
            say("from-1 " + got + " leaderEpoch " + epoch + " position " + c.position(p0) + " lag " + c.currentLag(p0));
            attempt("currentLag-unassigned", () -> c.currentLag(tp(t, 5)));
            attempt("position-unassigned", () -> c.position(tp(t, 5)));
            attempt("seek-negative", () -> c.seek(p0, -1));
            c.commitSync(Map.of(p0, new OffsetAndMetadata(2, Optional.of(0), "meta")));
            say("committed " + byPartition(c.committed(Set.of(p0, p1)), ConsumerEdges::oam));
            c.commitSync();
            say("commitSync-positions " + byPartition(c.committed(Set.of(p0, p1)), ConsumerEdges::oam));
            c.seek(p0, new OffsetAndMetadata(1, Optional.of(0), ""));
            say("seek-with-epoch position " + c.position(p0));
            ConsumerGroupMetadata m = c.groupMetadata();
            say("groupMetadata gen " + m.generationId() + " member-empty " + m.memberId().isEmpty() + " instance " + m.groupInstanceId());
        }
        // A fresh consumer, so no fetch from an earlier position is in flight.
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, null))) {
            c.assign(List.of(p0));
            c.seek(p0, 100);
            say("past-end " + pollUntil(c, 3, 10000) + " position " + c.position(p0));
        }
    }

    // beginningOffsets/endOffsets/offsetsForTimes at both isolation levels over an open transaction.
    static void times(String proto) throws Exception {
        String t = topic("times-" + proto, 1);
        produce(t, 0, 1, "a", "b", "c");
        TopicPartition p0 = tp(t, 0);
        Properties tx = new Properties();
        tx.put("bootstrap.servers", bootstrap);
        tx.put("key.serializer", StringSerializer.class.getName());
        tx.put("value.serializer", StringSerializer.class.getName());
        tx.put("transactional.id", "tx-" + run + "-" + proto);
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(tx)) {
            pr.initTransactions();
            pr.beginTransaction();
            pr.send(new ProducerRecord<>(t, 0, 4000L, null, "d")).get();
            pr.send(new ProducerRecord<>(t, 0, 5000L, null, "e")).get();
            for (String iso : List.of("read_uncommitted", "read_committed")) {
                Properties p = consumer(proto, null);
                p.put("isolation.level", iso);
                try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                    Map<TopicPartition, Long> ts = new HashMap<>();
                    String line = iso + " begin " + c.beginningOffsets(List.of(p0)).get(p0) + " end " + c.endOffsets(List.of(p0)).get(p0);
                    for (long at : List.of(0L, 2500L, 4500L, 9000L)) {
                        OffsetAndTimestamp o = c.offsetsForTimes(Map.of(p0, at)).get(p0);
                        line += " t" + at + "=" + (o == null ? "null" : o.offset() + "@" + o.timestamp());
                    }
                    say(line);
                    c.assign(List.of(p0));
                    say(iso + " read " + pollUntil(c, iso.equals("read_committed") ? 3 : 5, 5000) + " position " + c.position(p0) + " lag " + c.currentLag(p0));
                    c.seekToEnd(List.of(p0));
                    say(iso + " seekToEnd " + c.position(p0));
                }
            }
            pr.commitTransaction();
            pr.beginTransaction();
            pr.send(new ProducerRecord<>(t, 0, 6000L, null, "f")).get();
            pr.send(new ProducerRecord<>(t, 0, 7000L, null, "g")).get();
            pr.abortTransaction();
        }
        produce(t, 0, 8, "h");
        for (String iso : List.of("read_uncommitted", "read_committed")) {
            Properties p = consumer(proto, null);
            p.put("isolation.level", iso);
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                c.assign(List.of(p0));
                say(iso + " after-abort " + pollUntil(c, iso.equals("read_committed") ? 6 : 8, 5000) + " position " + c.position(p0) + " end " + c.endOffsets(List.of(p0)).get(p0));
                OffsetAndTimestamp o = c.offsetsForTimes(Map.of(p0, 6500L)).get(p0);
                say(iso + " offsetsForTimes-aborted " + (o == null ? "null" : o.offset() + "@" + o.timestamp()));
            }
        }
        Properties p = consumer(proto, null);
        p.put("isolation.level", "read_committed");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            // Kafka writes the commit markers after answering EndTxn, so the last stable offset
            // may trail commitTransaction's return by a moment.
            long end = c.endOffsets(List.of(p0)).get(p0);
            for (long dl = System.currentTimeMillis() + 5000; end < 10 && System.currentTimeMillis() < dl; Thread.sleep(50))
                end = c.endOffsets(List.of(p0)).get(p0);
            say("after-commit end " + end);
            attempt("offsetsForTimes-negative", () -> c.offsetsForTimes(Map.of(p0, -5L)));
            attempt("endOffsets-unknown-topic", () -> c.endOffsets(List.of(tp("ce-" + run + "-none", 0)), Duration.ofSeconds(1)));
            attempt("beginningOffsets-unknown-partition", () -> c.beginningOffsets(List.of(tp(t, 4)), Duration.ofSeconds(1)));
        }
    }

    // pause/resume: paused partitions yield nothing until resumed.
    static void pause(String proto) throws Exception {
        String t = topic("pause-" + proto, 1);
        produce(t, 0, -1, "a", "b", "c");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "pause"))) {
            c.subscribe(List.of(t), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) { }
                public void onPartitionsAssigned(Collection<TopicPartition> ps) { c.pause(ps); }
            });
            awaitAssigned(c, 1, 20000);
            int n = 0;
            for (int i = 0; i < 5; i++) n += c.poll(Duration.ofMillis(100)).count();
            say("paused " + parts(c.paused()) + " got " + n);
            c.resume(c.assignment());
            say("resumed paused " + parts(c.paused()) + " got " + pollUntil(c, 3, 10000));
            c.pause(List.of(tp(t, 0)));
            attempt("pause-unassigned", () -> c.pause(List.of(tp(t, 3))));
            c.unsubscribe();
            say("after-unsubscribe paused " + parts(c.paused()));
        }
    }

    // A pattern subscription; the classic consumer matches topics itself, on metadata refresh.
    static void pattern(String proto) throws Exception {
        String a = topic("pat-" + proto + "-a", 1);
        Properties p = consumer(proto, "pattern");
        p.put("metadata.max.age.ms", "500");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(Pattern.compile("ce-" + run + "-pat-" + proto + "-.*"));
            awaitAssigned(c, 1, 20000);
            say("assigned " + parts(c.assignment()) + " subscription " + c.subscription().size());
            topic("pat-" + proto + "-b", 2);
            awaitAssigned(c, 3, 25000);
            say("after-new-topic " + parts(c.assignment()));
        }
    }

    // Rebalance listener callbacks on subscription changes, unsubscribe and close.
    static void listener(String proto) throws Exception {
        String a = topic("lis-" + proto + "-a", 2), b = topic("lis-" + proto + "-b", 1);
        List<String> ev = Collections.synchronizedList(new ArrayList<>());
        KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "listener"));
        c.subscribe(List.of(a), recorder(ev));
        awaitAssigned(c, 2, 20000);
        say("subscribe-a " + ev); ev.clear();
        c.subscribe(List.of(a, b), recorder(ev));
        awaitAssigned(c, 3, 20000);
        say("subscribe-a-b " + ev); ev.clear();
        c.subscribe(List.of(b), recorder(ev));
        awaitAssigned(c, 1, 20000);
        say("subscribe-b " + ev + " assignment " + parts(c.assignment())); ev.clear();
        c.unsubscribe();
        say("unsubscribe " + ev + " assignment " + parts(c.assignment())); ev.clear();
        c.subscribe(List.of(a), recorder(ev));
        awaitAssigned(c, 2, 20000);
        say("resubscribe-a " + ev); ev.clear();
        c.close();
        say("close " + ev);
    }

    // enable.auto.commit commits the consumed positions on close.
    static void autocommit(String proto) throws Exception {
        String t = topic("auto-" + proto, 1);
        produce(t, 0, -1, "a", "b", "c");
        Properties p = consumer(proto, "auto");
        p.put("enable.auto.commit", "true");
        p.put("auto.commit.interval.ms", "600000");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(t));
            say("consumed " + pollUntil(c, 3, 20000).size());
        }
        var offs = admin.listConsumerGroupOffsets("g-" + run + "-auto-" + proto).partitionsToOffsetAndMetadata().get();
        say("committed-after-close " + byPartition(offs, ConsumerEdges::oam));
    }

    // commitSync/commitAsync/committed for partitions and topics that do not exist.
    static void unknown(String proto) throws Exception {
        String t = topic("unk-" + proto, 1);
        TopicPartition bad = tp(t, 9), none = tp("ce-" + run + "-nosuch", 0);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "unknown"))) {
            c.assign(List.of(tp(t, 0)));
            attempt("commitSync-unknown-partition", () -> c.commitSync(Map.of(bad, new OffsetAndMetadata(1)), Duration.ofSeconds(1)));
            attempt("commitSync-unknown-topic", () -> c.commitSync(Map.of(none, new OffsetAndMetadata(1)), Duration.ofSeconds(1)));
            List<String> res = Collections.synchronizedList(new ArrayList<>());
            c.commitAsync(Map.of(bad, new OffsetAndMetadata(1)), (o, e) -> res.add("partition " + (e == null ? "ok" : ex(e))));
            c.commitAsync(Map.of(none, new OffsetAndMetadata(1)), (o, e) -> res.add("topic " + (e == null ? "ok" : ex(e))));
            long dl = System.currentTimeMillis() + 8000;
            while (res.size() < 2 && System.currentTimeMillis() < dl) c.poll(Duration.ofMillis(100));
            Collections.sort(res);
            for (String r : res) say("commitAsync-unknown-" + r);
            attempt("committed-unknown", () -> say("committed " + byPartition(c.committed(Set.of(bad, none), Duration.ofSeconds(2)), ConsumerEdges::oam)));
        }
    }

    // Exceeding max.poll.interval.ms: the member leaves; a commit then fails; a poll rejoins.
    static void pollInterval(String proto) throws Exception {
        String t = topic("mpi-" + proto, 1);
        produce(t, 0, -1, "a", "b");
        Properties p = consumer(proto, "mpi");
        p.put("max.poll.interval.ms", "1500");
        List<String> ev = Collections.synchronizedList(new ArrayList<>());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(t), recorder(ev));
            say("consumed " + pollUntil(c, 2, 20000).size());
            Thread.sleep(3500);
            attempt("commitSync-after-interval", () -> c.commitSync(Duration.ofSeconds(5)));
            awaitAssigned(c, 1, 1);
            say("assignment-after " + parts(c.assignment()));
            long dl = System.currentTimeMillis() + 20000;
            while (ev.size() < 3 && System.currentTimeMillis() < dl) c.poll(Duration.ofMillis(100));
            say("events " + ev);
            attempt("commitSync-after-rejoin", () -> c.commitSync(Map.of(tp(t, 0), new OffsetAndMetadata(2)), Duration.ofSeconds(5)));
        }
    }

    // enforceRebalance, and groupMetadata before, during and after membership.
    static void enforce(String proto) throws Exception {
        String t = topic("enf-" + proto, 1);
        List<String> ev = Collections.synchronizedList(new ArrayList<>());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "enforce"))) {
            ConsumerGroupMetadata m0 = c.groupMetadata();
            say("before gen " + m0.generationId() + " member-empty " + m0.memberId().isEmpty() + " group-has-run " + m0.groupId().contains("R"));
            c.subscribe(List.of(t), recorder(ev));
            awaitAssigned(c, 1, 20000);
            ConsumerGroupMetadata m1 = c.groupMetadata();
            // The joining callbacks are the listener scenario's; a consumer-protocol member may
            // first reconcile an empty assignment while its metadata lacks the new topic's id.
            say("joined gen>0 " + (m1.generationId() > 0) + " member-empty " + m1.memberId().isEmpty() + " instance " + m1.groupInstanceId() + " assignment " + parts(c.assignment()));
            ev.clear();
            c.enforceRebalance("probe");
            long dl = System.currentTimeMillis() + 3000;
            while (System.currentTimeMillis() < dl && ev.size() < 2) c.poll(Duration.ofMillis(100));
            ConsumerGroupMetadata m2 = c.groupMetadata();
            say("enforced gen-delta " + (m2.generationId() - m1.generationId()) + " same-member " + m2.memberId().equals(m1.memberId()) + " events " + ev);
            c.unsubscribe();
            ConsumerGroupMetadata m3 = c.groupMetadata();
            say("unsubscribed gen " + m3.generationId() + " member-empty " + m3.memberId().isEmpty());
        }
    }

    // No group.id: group operations fail on the client with InvalidGroupIdException.
    static void noGroup(String proto) throws Exception {
        String t = topic("nog-" + proto, 1);
        produce(t, 0, -1, "a");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, null))) {
            c.assign(List.of(tp(t, 0)));
            say("read " + pollUntil(c, 1, 10000));
            attempt("commitSync", () -> c.commitSync());
            attempt("commitSync-offsets", () -> c.commitSync(Map.of(tp(t, 0), new OffsetAndMetadata(1))));
            List<String> res = Collections.synchronizedList(new ArrayList<>());
            attempt("commitAsync", () -> c.commitAsync((o, e) -> res.add(e == null ? "ok" : ex(e))));
            c.poll(Duration.ofMillis(200));
            say("commitAsync-callback " + res);
            attempt("committed", () -> c.committed(Set.of(tp(t, 0))));
            attempt("groupMetadata", () -> c.groupMetadata());
            attempt("subscribe", () -> c.subscribe(List.of(t)));
            attempt("enforceRebalance", () -> c.enforceRebalance());
        }
    }

    // max.partition.fetch.bytes / fetch.max.bytes below one batch: the batch still comes whole.
    static void fetchSizes(String proto) throws Exception {
        String t = topic("fsz-" + proto, 1);
        String big = "x".repeat(400);
        produce(t, 0, -1, big + "1", big + "2", big + "3");
        produce(t, 0, -1, big + "4", big + "5");
        for (String limit : List.of("max.partition.fetch.bytes", "fetch.max.bytes")) {
            Properties p = consumer(proto, null);
            p.put(limit, "100");
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                c.assign(List.of(tp(t, 0)));
                List<Integer> sizes = new ArrayList<>();
                int total = 0;
                long dl = System.currentTimeMillis() + 10000;
                while (total < 5 && System.currentTimeMillis() < dl) {
                    int n = c.poll(Duration.ofMillis(100)).count();
                    if (n > 0) sizes.add(n);
                    total += n;
                }
                say(limit + "=100 polls " + sizes);
            }
        }
    }

    // A topic deleted and recreated under an assigned consumer.
    static void recreate(String proto) throws Exception {
        String t = topic("rec-" + proto, 1);
        produce(t, 0, -1, "a", "b", "c");
        TopicPartition p0 = tp(t, 0);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "recreate"))) {
            c.assign(List.of(p0));
            say("before " + pollUntil(c, 3, 10000) + " position " + c.position(p0));
            admin.deleteTopics(List.of(t)).all().get();
            long dl = System.currentTimeMillis() + 10000;
            while (System.currentTimeMillis() < dl) {
                try {
                    admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all().get();
                    break;
                } catch (ExecutionException e) {
                    Thread.sleep(200);
                }
            }
            produce(t, 0, -1, "new");
            List<String> got = new ArrayList<>();
            attempt("poll-recreated", () -> got.addAll(pollUntil(c, 1, 15000)));
            say("after " + got + " position " + c.position(p0));
        }
    }

    // clientInstanceId with telemetry on (the broker has no telemetry plugin) and off.
    static void telemetry(String proto) throws Exception {
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, null))) {
            attempt("clientInstanceId-default", () -> say("instance-id null=" + (c.clientInstanceId(Duration.ofMillis(500)) == null)));
        }
        Properties p = consumer(proto, null);
        p.put("enable.metrics.push", "false");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            attempt("clientInstanceId-disabled", () -> c.clientInstanceId(Duration.ofMillis(500)));
        }
    }

    // listTopics / partitionsFor, for topics that exist and that do not.
    static void metadata(String proto) throws Exception {
        String t = topic("meta-" + proto, 3);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, null))) {
            TreeSet<String> mine = new TreeSet<>();
            for (String name : c.listTopics().keySet()) if (name.equals(t)) mine.add(name);
            say("listTopics has-topic " + mine.size() + " internal-listed " + c.listTopics().containsKey("__consumer_offsets"));
            List<PartitionInfo> ps = c.partitionsFor(t);
            TreeSet<String> desc = new TreeSet<>();
            for (PartitionInfo pi : ps) desc.add(pi.partition() + ":leader=" + (pi.leader() != null) + ":replicas=" + pi.replicas().length + ":isr=" + pi.inSyncReplicas().length + ":offline=" + pi.offlineReplicas().length);
            say("partitionsFor " + desc);
            attempt("partitionsFor-unknown", () -> say("unknown " + c.partitionsFor("ce-" + run + "-absent", Duration.ofSeconds(2))));
            attempt("partitionsFor-invalid-name", () -> c.partitionsFor("bad name!", Duration.ofSeconds(2)));
            attempt("partitionsFor-internal", () -> say("internal " + c.partitionsFor("__consumer_offsets").isEmpty()));
        }
    }

    // auto.offset.reset none / latest / by_duration, and a committed offset past the log end.
    static void reset(String proto) throws Exception {
        String t = topic("reset-" + proto, 2);
        produce(t, 0, 1, "a", "b", "c");
        TopicPartition p0 = tp(t, 0), p1 = tp(t, 1);
        Properties none = consumer(proto, "reset");
        none.put("auto.offset.reset", "none");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(none)) {
            c.assign(List.of(p0));
            attempt("none-no-committed", () -> c.poll(Duration.ofSeconds(1)));
            c.commitSync(Map.of(p0, new OffsetAndMetadata(10), p1, new OffsetAndMetadata(0)));
        }
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(none)) {
            c.assign(List.of(p0, p1));
            attempt("none-committed-past-end", () -> { for (int i = 0; i < 10; i++) c.poll(Duration.ofMillis(200)); });
        }
        for (String policy : List.of("earliest", "latest", "by_duration:PT1H")) {
            Properties p = consumer(proto, "reset");
            p.put("auto.offset.reset", policy);
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                c.assign(List.of(p0));
                List<String> got = pollUntil(c, 3, policy.equals("earliest") ? 10000 : 1500);
                attempt(policy + " committed-past-end", () -> say(policy + " committed-past-end " + got + " position " + c.position(p0, Duration.ofSeconds(1))));
            }
            Properties q = consumer(proto, null);
            q.put("auto.offset.reset", policy);
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(q)) {
                c.assign(List.of(p0));
                attempt(policy + " no-committed", () -> say(policy + " no-committed position " + c.position(p0, Duration.ofSeconds(1))));
            }
        }
        attempt("bad-policy", () -> { Properties p = consumer(proto, null); p.put("auto.offset.reset", "by_duration:forever"); new KafkaConsumer<String, String>(p).close(); });
    }

    // Subscribing to a topic before it exists.
    static void lateTopic(String proto) throws Exception {
        String t = "ce-" + run + "-late-" + proto;
        Properties p = consumer(proto, "late");
        p.put("metadata.max.age.ms", "500");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(t));
            for (int i = 0; i < 5; i++) c.poll(Duration.ofMillis(100));
            say("before-create " + parts(c.assignment()));
            topic("late-" + proto, 2);
            produce(t, 1, -1, "x");
            say("after-create " + pollUntil(c, 1, 20000) + " assignment " + parts(c.assignment()));
        }
    }

    // Broker-side regular expressions (SubscriptionPattern, KIP-848).
    static void subPattern(String proto) throws Exception {
        topic("sp-" + proto + "-a", 1);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "subpattern"))) {
            attempt("subscribe", () -> c.subscribe(new SubscriptionPattern("ce-" + run + "-sp-" + proto + "-.*")));
            if (proto.equals("classic")) return;
            awaitAssigned(c, 1, 20000);
            say("assigned " + parts(c.assignment()));
            topic("sp-" + proto + "-b", 1);
            awaitAssigned(c, 2, 30000);
            say("after-new-topic " + parts(c.assignment()));
        }
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "badregex"))) {
            c.subscribe(new SubscriptionPattern("ce-(unclosed"));
            attempt("poll-invalid-regex", () -> { for (int i = 0; i < 20; i++) c.poll(Duration.ofMillis(100)); });
        }
    }

    // A consumer without group membership (assign) committing to a group with an active member,
    // and offset metadata above offset.metadata.max.bytes.
    static void assignCommit(String proto) throws Exception {
        String t = topic("ac-" + proto, 1);
        TopicPartition p0 = tp(t, 0);
        try (KafkaConsumer<String, String> member = new KafkaConsumer<>(consumer(proto, "assigncommit"));
             KafkaConsumer<String, String> loner = new KafkaConsumer<>(consumer(proto, "assigncommit"))) {
            member.subscribe(List.of(t));
            awaitAssigned(member, 1, 20000);
            loner.assign(List.of(p0));
            attempt("assigned-commit-active-group", () -> loner.commitSync(Map.of(p0, new OffsetAndMetadata(1)), Duration.ofSeconds(3)));
            attempt("committed-active-group", () -> say("committed " + byPartition(loner.committed(Set.of(p0)), ConsumerEdges::oam)));
            attempt("member-commit-metadata-too-large", () -> member.commitSync(Map.of(p0, new OffsetAndMetadata(0, "m".repeat(5000)))));
            attempt("member-commit-other-partition", () -> member.commitSync(Map.of(tp(t, 3), new OffsetAndMetadata(0)), Duration.ofSeconds(1)));
        }
    }

    // A classic member and a KIP-848 member in one group (the online migration).
    static void mixed(String proto) throws Exception {
        String t = topic("mix", 2);
        String g = "g-" + run + "-mixed";
        Properties a = consumer("classic", null), b = consumer("consumer", null);
        a.put("group.id", g);
        b.put("group.id", g);
        KafkaConsumer<String, String> ca = new KafkaConsumer<>(a), cb = new KafkaConsumer<>(b);
        ca.subscribe(List.of(t));
        awaitAssigned(ca, 2, 20000);
        say("classic-alone type " + admin.describeConsumerGroups(List.of(g)).all().get().get(g).type());
        cb.subscribe(List.of(t));
        long dl = System.currentTimeMillis() + 30000;
        while ((ca.assignment().size() != 1 || cb.assignment().size() != 1) && System.currentTimeMillis() < dl) {
            ca.poll(Duration.ofMillis(100));
            cb.poll(Duration.ofMillis(100));
        }
        var d = admin.describeConsumerGroups(List.of(g)).all().get().get(g);
        say("both classic=" + ca.assignment().size() + " consumer=" + cb.assignment().size() + " type " + d.type() + " members " + d.members().size() + " state " + d.groupState());
        cb.close();
        dl = System.currentTimeMillis() + 20000;
        while (ca.assignment().size() != 2 && System.currentTimeMillis() < dl) ca.poll(Duration.ofMillis(100));
        d = admin.describeConsumerGroups(List.of(g)).all().get().get(g);
        say("after-consumer-left classic=" + ca.assignment().size() + " type " + d.type() + " members " + d.members().size());
        ca.close();
        d = admin.describeConsumerGroups(List.of(g)).all().get().get(g);
        say("empty type " + d.type() + " state " + d.groupState());
    }

    // Offsets a transaction has sent but not committed: a read_committed consumer asks for
    // stable offsets (RequireStable) and waits; read_uncommitted sees the last committed ones.
    static void pendingTxn(String proto) throws Exception {
        String t = topic("ptx-" + proto, 1);
        TopicPartition p0 = tp(t, 0);
        produce(t, 0, -1, "a", "b");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumer(proto, "ptx"))) {
            c.commitSync(Map.of(p0, new OffsetAndMetadata(1)));
        }
        Properties tx = new Properties();
        tx.put("bootstrap.servers", bootstrap);
        tx.put("key.serializer", StringSerializer.class.getName());
        tx.put("value.serializer", StringSerializer.class.getName());
        tx.put("transactional.id", "tx-" + run + "-ptx-" + proto);
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(tx)) {
            pr.initTransactions();
            pr.beginTransaction();
            pr.sendOffsetsToTransaction(Map.of(p0, new OffsetAndMetadata(2, "tx")), new ConsumerGroupMetadata("g-" + run + "-ptx-" + proto));
            for (String iso : List.of("read_uncommitted", "read_committed")) {
                Properties p = consumer(proto, "ptx");
                p.put("isolation.level", iso);
                try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                    attempt(iso + "-committed-pending", () -> say(iso + " committed " + byPartition(c.committed(Set.of(p0), Duration.ofSeconds(1)), ConsumerEdges::oam)));
                }
            }
            pr.commitTransaction();
        }
        Properties p = consumer(proto, "ptx");
        p.put("isolation.level", "read_committed");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            say("after-commit committed " + byPartition(c.committed(Set.of(p0), Duration.ofSeconds(5)), ConsumerEdges::oam));
        }
    }

    // A classic session timeout outside the broker's group.min/max.session.timeout.ms.
    static void sessionTimeout(String proto) throws Exception {
        String t = topic("sto-" + proto, 1);
        for (String ms : List.of("1000", "2000000")) {
            Properties p = consumer(proto, "sto");
            p.put("session.timeout.ms", ms);
            p.put("heartbeat.interval.ms", "300");
            p.put("request.timeout.ms", "3000000");
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                c.subscribe(List.of(t));
                attempt("session-" + ms, () -> { for (int i = 0; i < 20; i++) c.poll(Duration.ofMillis(100)); });
            }
        }
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        run = args[1];
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        admin = Admin.create(ap);
        Map<String, Step> all = new LinkedHashMap<>();
        for (String proto : List.of("classic", "consumer")) {
            all.put("positions-" + proto, () -> positions(proto));
            all.put("times-" + proto, () -> times(proto));
            all.put("pause-" + proto, () -> pause(proto));
            all.put("pattern-" + proto, () -> pattern(proto));
            all.put("listener-" + proto, () -> listener(proto));
            all.put("autocommit-" + proto, () -> autocommit(proto));
            all.put("unknown-" + proto, () -> unknown(proto));
            all.put("pollInterval-" + proto, () -> pollInterval(proto));
            all.put("enforce-" + proto, () -> enforce(proto));
            all.put("noGroup-" + proto, () -> noGroup(proto));
            all.put("fetchSizes-" + proto, () -> fetchSizes(proto));
            all.put("recreate-" + proto, () -> recreate(proto));
            all.put("telemetry-" + proto, () -> telemetry(proto));
            all.put("metadata-" + proto, () -> metadata(proto));
            all.put("reset-" + proto, () -> reset(proto));
            all.put("lateTopic-" + proto, () -> lateTopic(proto));
            all.put("subPattern-" + proto, () -> subPattern(proto));
            all.put("assignCommit-" + proto, () -> assignCommit(proto));
        }
        for (String proto : List.of("classic", "consumer")) all.put("pendingTxn-" + proto, () -> pendingTxn(proto));
        all.put("sessionTimeout-classic", () -> sessionTimeout("classic"));
        all.put("mixed-both", () -> mixed("both"));
        Set<String> only = new HashSet<>(Arrays.asList(args).subList(2, args.length));
        for (var e : all.entrySet()) {
            if (!only.isEmpty() && !only.contains(e.getKey())) continue;
            scope = e.getKey();
            long started = System.currentTimeMillis();
            try {
                e.getValue().run();
            } catch (Throwable t) {
                say("UNCAUGHT " + ex(t));
            }
            System.err.println("took " + (System.currentTimeMillis() - started) + " ms: " + scope);
        }
        admin.close();
        System.exit(0);
    }
}
