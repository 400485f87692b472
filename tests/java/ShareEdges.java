// Kafka's Java KafkaShareConsumer and Admin share-group calls at their edges, one scenario at a
// time, each on its own topic and group; every line printed is normalized ("[SCENARIO] ...": record
// offsets and delivery counts, per-partition commit results, callback and exception class names, no
// ids or times) so one broker's output can be diffed against another's.
// Run with: java -cp <kafka-clients jars> ShareEdges.java BOOTSTRAP PREFIX SCENARIO...
// The broker needs group.share.min.record.lock.duration.ms=1000 (the lock scenarios) and
// group.share.max.size=3 ("maxsize", whose refused member depends on the heartbeats' order).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareEdges {
    static String bootstrap;
    static String prefix;
    static String scenario;
    static Admin admin;

    static synchronized void say(String line) {
        System.out.println("[" + scenario + "] " + line);
        System.out.flush();
    }

    static String name(Throwable t) {
        while ((t instanceof ExecutionException || t.getClass() == KafkaException.class) && t.getCause() != null) {
            t = t.getCause();
        }
        return t.getClass().getSimpleName();
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        admin = Admin.create(ap);
        try {
            for (int i = 2; i < args.length; i++) {
                scenario = args[i];
                try {
                    run(args[i]);
                } catch (Exception e) {
                    say("FAILED " + name(e) + " " + e.getMessage());
                }
            }
        } finally {
            admin.close();
        }
        scenario = "end";
        say("done");
    }

    static void run(String s) throws Exception {
        switch (s) {
            case "implicit" -> implicit();
            case "explicit" -> explicit();
            case "misuse" -> misuse();
            case "unacked" -> unacked();
            case "limit" -> limit();
            case "lock" -> lock();
            case "renew" -> renew();
            case "latest" -> latest();
            case "duration" -> duration();
            case "later" -> later();
            case "txn" -> txn();
            case "maxpoll" -> maxpoll();
            case "wakeup" -> wakeup();
            case "close" -> closePending();
            case "async" -> async();
            case "admin" -> admin();
            case "deleted" -> deleted();
            case "badconfig" -> badconfig();
            case "alter" -> alter();
            case "acquire" -> acquire();
            case "members" -> members();
            case "implicitlock" -> implicitLock();
            case "partial" -> partial();
            case "limitlock" -> limitLock();
            case "reuse" -> reuse();
            case "expiry" -> expiry();
            case "renewoff" -> renewOff();
            case "opentxn" -> openTxn();
            case "twoparts" -> twoParts();
            case "maxsize" -> maxSize();
            default -> throw new IllegalArgumentException(s);
        }
    }

    static String topic() {
        return prefix + "-" + scenario;
    }

    static String group() {
        return prefix + "-g-" + scenario;
    }

    static void create(String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    static void groupConfig(String group, String... kv) throws Exception {
        List<AlterConfigOp> ops = new ArrayList<>();
        for (int i = 0; i < kv.length; i += 2) {
            ops.add(new AlterConfigOp(new ConfigEntry(kv[i], kv[i + 1]), AlterConfigOp.OpType.SET));
        }
        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops)).all().get();
    }

    static void produce(String topic, int from, int to) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = from; i < to; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get();
            }
        }
    }

    static KafkaShareConsumer<String, String> consumer(String group, String... kv) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        for (int i = 0; i < kv.length; i += 2) {
            props.put(kv[i], kv[i + 1]);
        }
        return new KafkaShareConsumer<>(props);
    }

    /** A fresh one-partition topic holding records 0 to records - 1, which the group reads from the start. */
    static void filled(int records) throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        produce(topic(), 0, records);
    }

    /** A consumer of the group (settings in key, value pairs) that reports its commits, subscribed to the topic. */
    static KafkaShareConsumer<String, String> subscribed(String... kv) {
        KafkaShareConsumer<String, String> c = consumer(group(), kv);
        callback(c);
        c.subscribe(List.of(topic()));
        return c;
    }

    /** Polls until {@code want} records came or 20 s passed; says how many came and the most in one poll. */
    static void sayBatches(KafkaShareConsumer<String, String> c, int want, String label) {
        int total = 0, biggest = 0;
        long end = System.currentTimeMillis() + 20000;
        while (total < want && System.currentTimeMillis() < end) {
            int n = c.poll(Duration.ofMillis(500)).count();
            total += n;
            biggest = Math.max(biggest, n);
        }
        say(label + "total " + total + " biggest " + biggest);
    }

    /** Records v0 to v{@code records - 1}, all with key k, sent together so that they make one batch. */
    static void produceOneBatch(int records) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "1000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic(), 0, "k", "v" + i));
            }
        }
    }

    static void callback(KafkaShareConsumer<String, String> c) {
        c.setAcknowledgementCommitCallback((offsets, exception) -> {
            StringBuilder line = new StringBuilder("callback ");
            line.append(exception == null ? "-" : exception.getClass().getSimpleName());
            Map<Integer, Set<Long>> sorted = new TreeMap<>();
            for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
                sorted.computeIfAbsent(e.getKey().partition(), k -> new TreeSet<>()).addAll(e.getValue());
            }
            sorted.forEach((p, o) -> line.append(' ').append(p).append(':').append(o.toString().replace(" ", "")));
            say(line.toString());
        });
    }

    // Polls until at least n records arrived or the deadline passed; prints each "rec P OFFSET COUNT".
    static List<ConsumerRecord<String, String>> pollFor(KafkaShareConsumer<String, String> c, int n, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long end = System.currentTimeMillis() + ms;
        while (got.size() < n && System.currentTimeMillis() < end) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                got.add(r);
            }
            if (!got.isEmpty() && n == Integer.MAX_VALUE) {
                break;
            }
        }
        got.sort((a, b) -> Long.compare(a.offset(), b.offset()));
        for (ConsumerRecord<String, String> r : got) {
            say("rec " + r.partition() + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1) + " " + r.value());
        }
        return got;
    }

    // One poll's worth of records (the first non-empty poll), for explicit mode.
    static List<ConsumerRecord<String, String>> pollSome(KafkaShareConsumer<String, String> c, long ms) {
        return pollFor(c, Integer.MAX_VALUE, ms);
    }

    static void commit(KafkaShareConsumer<String, String> c) {
        Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
        Map<Integer, String> sorted = new TreeMap<>();
        result.forEach((tp, e) -> sorted.put(tp.partition(), e.map(x -> x.getClass().getSimpleName()).orElse("ok")));
        say("commitSync " + sorted);
    }

    static void tryRun(String what, ThrowingRunnable r) {
        try {
            r.run();
            say(what + " ok");
        } catch (Exception e) {
            say(what + " " + name(e));
        }
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    static void implicit() throws Exception {
        filled(3);
        try (KafkaShareConsumer<String, String> c = subscribed()) {
            pollFor(c, 3, 20000);
            commit(c);
            say("again " + c.poll(Duration.ofMillis(1000)).count());
            commit(c);
        }
    }

    static void explicit() throws Exception {
        filled(3);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 3, 20000);
            c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT);
            c.acknowledge(rs.get(1), AcknowledgeType.RELEASE);
            c.acknowledge(rs.get(2), AcknowledgeType.REJECT);
            commit(c);
            List<ConsumerRecord<String, String>> again = pollSome(c, 10000);
            for (ConsumerRecord<String, String> r : again) {
                c.acknowledge(r);
            }
            commit(c);
            say("after " + c.poll(Duration.ofMillis(1000)).count());
            commit(c);
        }
    }

    static void misuse() throws Exception {
        filled(2);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 2, 20000);
            tryRun("ack-first", () -> c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT));
            tryRun("ack-twice", () -> c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT));
            tryRun("ack-twice-other-type", () -> c.acknowledge(rs.get(0), AcknowledgeType.RELEASE));
            ConsumerRecord<String, String> fake = new ConsumerRecord<>(topic(), 0, 99, "k", "v");
            tryRun("ack-undelivered", () -> c.acknowledge(fake));
            tryRun("ack-by-offset-undelivered", () -> c.acknowledge(topic(), 0, 99, AcknowledgeType.ACCEPT));
            tryRun("ack-by-offset", () -> c.acknowledge(topic(), 0, rs.get(1).offset(), AcknowledgeType.ACCEPT));
            tryRun("ack-other-topic", () -> c.acknowledge("nosuch", 0, 0, AcknowledgeType.ACCEPT));
            commit(c);
            tryRun("ack-after-commit", () -> c.acknowledge(rs.get(1), AcknowledgeType.ACCEPT));
            say("after " + c.poll(Duration.ofMillis(1000)).count());
            tryRun("ack-old-after-poll", () -> c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT));
        }
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            tryRun("implicit-ack", () -> {
                c.subscribe(List.of(topic()));
                c.acknowledge(new ConsumerRecord<>(topic(), 0, 0, "k", "v"));
            });
        }
    }

    static void unacked() throws Exception {
        filled(2);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 2, 20000);
            c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT);
            tryRun("poll-with-unacked", () -> c.poll(Duration.ofMillis(500)));
            tryRun("commit-with-unacked", () -> commit(c));
            c.acknowledge(rs.get(1), AcknowledgeType.ACCEPT);
            tryRun("poll-after-all-acked", () -> c.poll(Duration.ofMillis(500)));
        }
    }

    static void limit() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.delivery.count.limit", "2");
        produce(topic(), 0, 1);
        produce(topic(), 1, 2);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            for (int round = 0; round < 3; round++) {
                List<ConsumerRecord<String, String>> rs = pollSome(c, 8000);
                say("round " + round + " " + rs.size());
                for (ConsumerRecord<String, String> r : rs) {
                    c.acknowledge(r, r.offset() == 0 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                }
                commit(c);
            }
        }
        Map<TopicPartition, SharePartitionOffsetInfo> offs = admin.listShareGroupOffsets(
            Map.of(group(), new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group()).get();
        offs.forEach((tp, i) -> say("spso " + tp.partition() + " " + i.startOffset() + " lag " + i.lag()));
    }

    static void lock() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "2000");
        produce(topic(), 0, 2);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 2, 20000);
            say("acquisitionLockTimeoutMs " + c.acquisitionLockTimeoutMs());
            Thread.sleep(4000);
            c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT);
            c.acknowledge(rs.get(1), AcknowledgeType.ACCEPT);
            commit(c);
            List<ConsumerRecord<String, String>> again = pollFor(c, 2, 10000);
            for (ConsumerRecord<String, String> r : again) {
                c.acknowledge(r);
            }
            commit(c);
        }
    }

    static void renew() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "3000");
        produce(topic(), 0, 2);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 2, 20000);
            Thread.sleep(1500);
            c.acknowledge(rs.get(0), AcknowledgeType.RENEW);
            c.acknowledge(rs.get(1), AcknowledgeType.RENEW);
            commit(c);
            Thread.sleep(2000);
            // past the first lock, inside the renewed one: the renewed records come back from poll
            List<ConsumerRecord<String, String>> again = pollSome(c, 5000);
            for (ConsumerRecord<String, String> r : again) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            commit(c);
            say("after " + c.poll(Duration.ofMillis(1000)).count());
            commit(c);
        }
    }

    static void latest() throws Exception {
        create(topic(), 1);
        produce(topic(), 0, 2);
        try (KafkaShareConsumer<String, String> c = subscribed()) {
            int early = 0;
            for (int i = 0; i < 8; i++) {
                early += c.poll(Duration.ofMillis(500)).count();
            }
            say("before " + early);
            produce(topic(), 2, 4);
            pollFor(c, 2, 15000);
        }
    }

    static void duration() throws Exception {
        create(topic(), 1);
        produce(topic(), 0, 2);
        groupConfig(group(), "share.auto.offset.reset", "by_duration:PT1H");
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            pollFor(c, 2, 20000);
        }
        tryRun("bad-duration", () -> groupConfig(group(), "share.auto.offset.reset", "by_duration:PT-1H"));
        tryRun("bad-reset", () -> groupConfig(group(), "share.auto.offset.reset", "none"));
    }

    static void later() throws Exception {
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            say("before " + c.poll(Duration.ofMillis(2000)).count());
            create(topic(), 1);
            produce(topic(), 0, 2);
            pollFor(c, 2, 30000);
        }
    }

    static void txn() throws Exception {
        create(topic(), 1);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("transactional.id", prefix + "-tx");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic(), 0, "k", "committed1"));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic(), 0, "k", "aborted1"));
            producer.send(new ProducerRecord<>(topic(), 0, "k", "aborted2"));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic(), 0, "k", "committed2"));
            producer.commitTransaction();
        }
        for (String level : List.of("read_committed", "read_uncommitted")) {
            String g = group() + "-" + level;
            groupConfig(g, "share.auto.offset.reset", "earliest", "share.isolation.level", level);
            say("level " + level);
            try (KafkaShareConsumer<String, String> c = consumer(g)) {
                c.subscribe(List.of(topic()));
                pollFor(c, level.equals("read_committed") ? 2 : 4, 15000);
                say("more " + c.poll(Duration.ofMillis(1000)).count());
            }
        }
    }

    static void maxpoll() throws Exception {
        filled(5);
        try (KafkaShareConsumer<String, String> c = consumer(group(), "max.poll.records", "2")) {
            c.subscribe(List.of(topic()));
            sayBatches(c, 5, "");
        }
    }

    static void wakeup() throws Exception {
        create(topic(), 1);
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            c.wakeup();
            tryRun("poll-after-wakeup", () -> c.poll(Duration.ofMillis(2000)));
            tryRun("poll-again", () -> c.poll(Duration.ofMillis(500)));
        }
    }

    static void closePending() throws Exception {
        filled(3);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 3, 20000);
            c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT);
            c.acknowledge(rs.get(1), AcknowledgeType.REJECT);
            // rs[2] left unacknowledged: close releases it
        }
        say("closed");
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            pollFor(c, 1, 15000);
            say("more " + c.poll(Duration.ofMillis(1000)).count());
        }
    }

    static void async() throws Exception {
        filled(2);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollFor(c, 2, 20000);
            c.acknowledge(rs.get(0), AcknowledgeType.ACCEPT);
            c.acknowledge(rs.get(1), AcknowledgeType.RELEASE);
            c.commitAsync();
            // the callback runs inside a later poll/commit
            List<ConsumerRecord<String, String>> again = pollSome(c, 8000);
            for (ConsumerRecord<String, String> r : again) {
                c.acknowledge(r);
            }
            commit(c);
        }
    }

    static void describe(String g) throws Exception {
        describe(g, true);
    }

    // named: each member's client id with its partitions; else only how many each has (which
    // member gets which partition depends on the member ids)
    static void describe(String g, boolean named) throws Exception {
        ShareGroupDescription d = admin.describeShareGroups(List.of(g)).describedGroups().get(g).get();
        List<String> members = new ArrayList<>();
        for (ShareMemberDescription m : d.members()) {
            List<String> parts = new ArrayList<>();
            m.assignment().topicPartitions().forEach(tp -> parts.add(tp.partition() + ""));
            parts.sort(null);
            members.add((named ? m.clientId() + parts : String.valueOf(parts.size())) + " epoch>0=" + (m.memberEpoch() > 0));
        }
        members.sort(null);
        say("describe " + d.groupState() + " " + members + " groupEpoch>0=" + (d.groupEpoch() > 0)
            + " targetEpoch=groupEpoch " + (d.targetAssignmentEpoch() == d.groupEpoch()));
    }

    static void listOffsets(String g) throws Exception {
        Map<TopicPartition, SharePartitionOffsetInfo> offs = admin.listShareGroupOffsets(
            Map.of(g, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(g).get();
        Map<String, String> sorted = new TreeMap<>();
        offs.forEach((tp, i) -> sorted.put(tp.toString(), i == null ? "null" : i.startOffset() + "/lag=" + i.lag().map(String::valueOf).orElse("-")));
        say("offsets " + sorted);
    }

    static void admin() throws Exception {
        String t = topic();
        create(t, 2);
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        produce(t, 0, 3);
        tryRun("describe-missing", () -> describe(group() + "-missing"));
        tryRun("list-missing", () -> listOffsets(group() + "-missing"));
        try (KafkaShareConsumer<String, String> c = consumer(group(), "client.id", "m1")) {
            c.subscribe(List.of(t));
            pollFor(c, 3, 20000);
            c.commitSync();
            describe(group());
            listOffsets(group());
            tryRun("alter-active", () -> admin.alterShareGroupOffsets(group(), Map.of(new TopicPartition(t, 0), 0L)).all().get());
            tryRun("delete-offsets-active", () -> admin.deleteShareGroupOffsets(group(), Set.of(t)).all().get());
            tryRun("delete-group-active", () -> admin.deleteShareGroups(List.of(group())).all().get());
        }
        Thread.sleep(1000);
        describe(group());
        tryRun("alter-empty", () -> admin.alterShareGroupOffsets(group(), Map.of(new TopicPartition(t, 0), 1L)).all().get());
        tryRun("alter-bad-partition", () -> admin.alterShareGroupOffsets(group(), Map.of(new TopicPartition(t, 7), 0L)).all().get());
        tryRun("alter-bad-topic", () -> admin.alterShareGroupOffsets(group(), Map.of(new TopicPartition("nosuch-" + t, 0), 0L)).all().get());
        listOffsets(group());
        tryRun("delete-offsets-empty", () -> admin.deleteShareGroupOffsets(group(), Set.of(t)).all().get());
        tryRun("delete-offsets-unknown-topic", () -> admin.deleteShareGroupOffsets(group(), Set.of("nosuch-" + t)).all().get());
        listOffsets(group());
        tryRun("delete-group", () -> admin.deleteShareGroups(List.of(group())).all().get());
        tryRun("describe-deleted", () -> describe(group()));
        tryRun("delete-group-again", () -> admin.deleteShareGroups(List.of(group())).all().get());
        // a classic consumer group is not a share group
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group() + "-classic");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("auto.offset.reset", "earliest");
        try (org.apache.kafka.clients.consumer.KafkaConsumer<String, String> kc = new org.apache.kafka.clients.consumer.KafkaConsumer<>(cp)) {
            kc.subscribe(List.of(t));
            long end = System.currentTimeMillis() + 20000;
            int n = 0;
            while (n < 3 && System.currentTimeMillis() < end) {
                n += kc.poll(Duration.ofMillis(500)).count();
            }
            kc.commitSync();
        }
        tryRun("describe-classic", () -> describe(group() + "-classic"));
        tryRun("list-classic", () -> listOffsets(group() + "-classic"));
        tryRun("delete-share-classic", () -> admin.deleteShareGroups(List.of(group() + "-classic")).all().get());
    }

    static void deleted() throws Exception {
        filled(2);
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            pollFor(c, 2, 20000);
            c.commitSync();
            admin.deleteTopics(List.of(topic())).all().get();
            int n = 0;
            List<String> errors = new ArrayList<>();
            for (int i = 0; i < 6; i++) {
                try {
                    n += c.poll(Duration.ofMillis(500)).count();
                } catch (Exception e) {
                    if (!errors.contains(name(e))) {
                        errors.add(name(e));
                    }
                }
            }
            say("after-delete records " + n + " errors " + errors);
        }
        listOffsets(group());
    }

    static void badconfig() throws Exception {
        String g = group();
        tryRun("lock-too-low", () -> groupConfig(g, "share.record.lock.duration.ms", "500"));
        tryRun("limit-too-low", () -> groupConfig(g, "share.delivery.count.limit", "1"));
        tryRun("isolation-bad", () -> groupConfig(g, "share.isolation.level", "bogus"));
        tryRun("unknown-key", () -> groupConfig(g, "share.bogus", "1"));
        Collection<ConfigEntry> entries = admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.GROUP, g)))
            .all().get().values().iterator().next().entries();
        List<String> share = new ArrayList<>();
        for (ConfigEntry e : entries) {
            if (e.name().startsWith("share.")) {
                share.add(e.name() + "=" + e.value());
            }
        }
        share.sort(null);
        say("config " + share);
    }

    static void alter() throws Exception {
        String t = topic();
        create(t, 1);
        produce(t, 0, 4);
        TopicPartition tp = new TopicPartition(t, 0);
        tryRun("alter-negative", () -> admin.alterShareGroupOffsets(group(), Map.of(tp, -5L)).all().get());
        tryRun("alter-beyond-end", () -> admin.alterShareGroupOffsets(group(), Map.of(tp, 100L)).all().get());
        listOffsets(group());
        tryRun("alter-2", () -> admin.alterShareGroupOffsets(group(), Map.of(tp, 2L)).all().get());
        listOffsets(group());
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(t));
            pollFor(c, 2, 20000);
            c.commitSync();
        }
        listOffsets(group());
        tryRun("delete-offsets", () -> admin.deleteShareGroupOffsets(group(), Set.of(t)).all().get());
        listOffsets(group());
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(t));
            pollFor(c, 4, 20000);
        }
    }

    static void acquire() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        produceOneBatch(6);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acquire.mode", "record_limit", "max.poll.records", "2",
                                                                 "share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollSome(c, 20000);
            say("first-poll " + rs.size());
            for (ConsumerRecord<String, String> r : rs) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            commit(c);
            List<ConsumerRecord<String, String>> more = pollSome(c, 10000);
            for (ConsumerRecord<String, String> r : more) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            commit(c);
        }
        try (KafkaShareConsumer<String, String> c = consumer(group() + "-batch", "max.poll.records", "2")) {
            groupConfig(group() + "-batch", "share.auto.offset.reset", "earliest");
            c.subscribe(List.of(topic()));
            sayBatches(c, 6, "batch-mode ");
        }
    }

    static void members() throws Exception {
        create(topic(), 2);
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        try (KafkaShareConsumer<String, String> a = consumer(group(), "client.id", "a");
             KafkaShareConsumer<String, String> b = consumer(group(), "client.id", "b")) {
            a.subscribe(List.of(topic()));
            b.subscribe(List.of(topic()));
            for (int i = 0; i < 12; i++) {
                a.poll(Duration.ofMillis(250));
                b.poll(Duration.ofMillis(250));
            }
            describe(group(), false);
            say("subscription " + a.subscription());
            a.unsubscribe();
            say("after-unsubscribe " + a.subscription());
            tryRun("poll-unsubscribed", () -> a.poll(Duration.ofMillis(200)));
            for (int i = 0; i < 12; i++) {
                b.poll(Duration.ofMillis(250));
            }
            describe(group(), false);
        }
    }

    static void implicitLock() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "1500");
        produce(topic(), 0, 2);
        try (KafkaShareConsumer<String, String> c = subscribed()) {
            pollFor(c, 2, 20000);
            Thread.sleep(3000);
            // the implicit acknowledgement of the first poll goes with this one, too late
            pollFor(c, 2, 10000);
            commit(c);
        }
    }

    static void partial() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest");
        produceOneBatch(5);
        try (KafkaShareConsumer<String, String> c = subscribed("max.poll.records", "2",
                                                                 "share.acknowledgement.mode", "explicit")) {
            for (int round = 0; round < 4; round++) {
                List<ConsumerRecord<String, String>> rs = pollSome(c, 5000);
                say("round " + round + " " + rs.size());
                for (ConsumerRecord<String, String> r : rs) {
                    c.acknowledge(r, r.offset() == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                }
                commit(c);
            }
        }
    }

    static void limitLock() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "1000",
                    "share.delivery.count.limit", "2");
        produce(topic(), 0, 1);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollSome(c, 20000);
            Thread.sleep(2500);
            for (ConsumerRecord<String, String> r : rs) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            commit(c);
            rs = pollSome(c, 5000);
            Thread.sleep(2500);
            for (ConsumerRecord<String, String> r : rs) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            commit(c);
            say("after " + pollSome(c, 3000).size());
        }
        listOffsets(group());
    }

    static void reuse() throws Exception {
        filled(2);
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            pollFor(c, 2, 20000);
            c.commitSync();
        }
        Thread.sleep(1000);
        tryRun("delete-group", () -> admin.deleteShareGroups(List.of(group())).all().get());
        Collection<ConfigEntry> entries = admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.GROUP, group())))
            .all().get().values().iterator().next().entries();
        for (ConfigEntry e : entries) {
            if (e.name().equals("share.auto.offset.reset")) {
                say("reset-after-delete " + e.value() + " " + e.source());
            }
        }
        produce(topic(), 2, 3);
        try (KafkaShareConsumer<String, String> c = consumer(group())) {
            c.subscribe(List.of(topic()));
            pollFor(c, 3, 8000);
        }
    }

    // A lock expiry is written: the listed offsets show the partition's state (the record
    // Available again) though nothing was ever acknowledged.
    static void expiry() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "1000");
        produce(topic(), 0, 1);
        try (KafkaShareConsumer<String, String> c = consumer(group(), "share.acknowledgement.mode", "explicit")) {
            c.subscribe(List.of(topic()));
            pollSome(c, 20000);
            Thread.sleep(2500);
            listOffsets(group());
        }
    }

    static void renewOff() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.renew.acknowledge.enable", "false");
        produce(topic(), 0, 1);
        try (KafkaShareConsumer<String, String> c = subscribed("share.acknowledgement.mode", "explicit")) {
            List<ConsumerRecord<String, String>> rs = pollSome(c, 20000);
            tryRun("renew", () -> c.acknowledge(rs.get(0), AcknowledgeType.RENEW));
            tryRun("commit", () -> commit(c));
            List<ConsumerRecord<String, String>> again = pollSome(c, 3000);
            for (ConsumerRecord<String, String> r : again) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            tryRun("commit-again", () -> commit(c));
        }
    }

    static void openTxn() throws Exception {
        create(topic(), 1);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("transactional.id", prefix + "-open");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p);
             KafkaShareConsumer<String, String> c = consumer(group())) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic(), 0, "k", "open1"));
            producer.flush();
            c.subscribe(List.of(topic()));
            int early = 0;
            for (int i = 0; i < 6; i++) {
                early += c.poll(Duration.ofMillis(500)).count();
            }
            say("while-open " + early);
            producer.commitTransaction();
            pollFor(c, 1, 15000);
        }
    }

    static void twoParts() throws Exception {
        create(topic(), 2);
        groupConfig(group(), "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "1000");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>(topic(), 0, "k", "a")).get();
            producer.send(new ProducerRecord<>(topic(), 1, "k", "b")).get();
        }
        try (KafkaShareConsumer<String, String> c = consumer(group(), "share.acknowledgement.mode", "explicit")) {
            c.subscribe(List.of(topic()));
            // the partitions may come in one poll or two (each broker's timing): acknowledge per poll
            Map<Integer, String> results = new TreeMap<>();
            long end = System.currentTimeMillis() + 20000;
            while (results.size() < 2 && System.currentTimeMillis() < end) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    c.acknowledge(r, r.partition() == 0 ? AcknowledgeType.ACCEPT : AcknowledgeType.REJECT);
                }
                c.commitSync().forEach((tp, e) -> results.put(tp.partition(),
                    e.map(x -> x.getClass().getSimpleName()).orElse("ok")));
            }
            say("commits " + results);
            tryRun("ack-unknown-partition", () -> c.acknowledge(topic(), 5, 0, AcknowledgeType.ACCEPT));
        }
        listOffsets(group());
    }

    // The broker's group.share.max.size is 3 here: a fourth member is refused.
    static void maxSize() throws Exception {
        create(topic(), 1);
        List<KafkaShareConsumer<String, String>> cs = new ArrayList<>();
        try {
            for (int i = 0; i < 4; i++) {
                KafkaShareConsumer<String, String> c = consumer(group(), "client.id", "c" + i);
                c.subscribe(List.of(topic()));
                cs.add(c);
            }
            for (int round = 0; round < 8; round++) {
                for (int i = 0; i < cs.size(); i++) {
                    int k = i;
                    try {
                        cs.get(i).poll(Duration.ofMillis(200));
                    } catch (Exception e) {
                        say("member c" + k + " " + name(e));
                    }
                }
            }
            describe(group(), false);
        } finally {
            for (KafkaShareConsumer<String, String> c : cs) {
                c.close();
            }
        }
    }
}
