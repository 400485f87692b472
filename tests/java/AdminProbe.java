// A fixed script of Kafka Java Admin calls against one broker, printing one normalized line per
// call: the result (sorted; node ids, topic ids, timestamps, hosts and ports masked) or the
// exception's class name. Run against Rivulet and against Kafka 4.3.1, the outputs should be
// equal (tests/integration/test_java_admin.py). Each call's exception message goes to stderr,
// for reading, not comparing: messages are the one thing allowed to differ.
// Run with: java -cp <kafka jars> AdminProbe.java BOOTSTRAP [SECTION...]

import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.quota.*;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminProbe {
    interface Call { Object run() throws Exception; }

    static String bootstrap;
    static Admin admin;
    static int brokerId;
    static final String P = "probe-";
    static final List<AutoCloseable> open = new ArrayList<>();

    static void step(String name, Call call) {
        String out;
        try {
            Object r = call.run();
            out = "ok " + (r == null ? "" : r.toString());
        } catch (Throwable t) {
            Throwable c = t;
            while ((c instanceof ExecutionException || c instanceof java.util.concurrent.CompletionException) && c.getCause() != null) c = c.getCause();
            out = "ERR " + c.getClass().getSimpleName();
            System.err.println(name + ": " + c.getClass().getSimpleName() + ": " + c.getMessage());
        }
        System.out.println(name + " -> " + out);
        System.out.flush();
    }

    static String nid(int id) { return id == brokerId ? "N" : Integer.toString(id); }
    static String node(Node n) { return n == null ? "null" : n.isEmpty() ? "empty" : nid(n.id()); }
    static String nodes(Collection<Node> ns) { return ns.stream().map(AdminProbe::node).sorted().collect(Collectors.toList()).toString(); }
    static String ops(Set<AclOperation> ops) { return ops == null ? "null" : new TreeSet<>(ops.stream().map(Enum::name).collect(Collectors.toSet())).toString(); }
    static String tp(TopicPartition p) { return p.topic() + "-" + p.partition(); }
    static <T> String sorted(Collection<T> c) { return new TreeSet<>(c.stream().map(Object::toString).collect(Collectors.toList())).toString(); }

    static String topic(TopicDescription d) {
        StringBuilder b = new StringBuilder(d.name() + " internal=" + d.isInternal() + " id=" + (d.topicId() == null ? "null" : "U") + " ops=" + ops(d.authorizedOperations()) + " [");
        for (TopicPartitionInfo p : d.partitions()) {
            b.append(" ").append(p.partition()).append(":leader=").append(node(p.leader())).append(",replicas=").append(nodes(p.replicas()))
                .append(",isr=").append(nodes(p.isr())).append(",elr=").append(p.elr() == null ? "null" : nodes(p.elr()))
                .append(",lastKnownElr=").append(p.lastKnownElr() == null ? "null" : nodes(p.lastKnownElr()));
        }
        return b.append(" ]").toString();
    }

    static String entry(ConfigEntry e, boolean values, boolean detail) {
        String s = e.name() + (values ? "=" + e.value() : "") + "|" + e.source() + (e.isReadOnly() ? "|ro" : "") + (e.isSensitive() ? "|sens" : "");
        if (detail) {
            s += "|type=" + e.type() + "|doc=" + (e.documentation() == null ? "null" : e.documentation().isEmpty() ? "empty" : "text")
                + "|syn=" + e.synonyms().stream().map(y -> y.name() + (values ? "=" + y.value() : "") + ":" + y.source()).collect(Collectors.toList());
        }
        return s;
    }

    static String config(ConfigResource r, boolean values, boolean detail, Set<String> only) throws Exception {
        DescribeConfigsOptions o = new DescribeConfigsOptions().includeSynonyms(detail).includeDocumentation(detail);
        Config c = admin.describeConfigs(List.of(r), o).all().get().get(r);
        TreeMap<String, String> m = new TreeMap<>();
        for (ConfigEntry e : c.entries()) if (only == null || only.contains(e.name())) m.put(e.name(), entry(e, values, detail));
        return m.size() + " " + m.values();
    }

    static ConfigResource topicRes(String t) { return new ConfigResource(ConfigResource.Type.TOPIC, t); }

    static String alter(ConfigResource r, boolean validateOnly, AlterConfigOp... ops) throws Exception {
        admin.incrementalAlterConfigs(Map.of(r, List.of(ops)), new AlterConfigsOptions().validateOnly(validateOnly)).all().get();
        return "";
    }

    // Kafka applies a broker config through its metadata log, after answering the alter.
    static String settle() throws InterruptedException { Thread.sleep(1500); return ""; }

    static AlterConfigOp set(String k, String v) { return new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET); }
    static AlterConfigOp op(String k, String v, AlterConfigOp.OpType t) { return new AlterConfigOp(new ConfigEntry(k, v), t); }

    static String create(NewTopic t, boolean validateOnly) throws Exception {
        CreateTopicsResult r = admin.createTopics(List.of(t), new CreateTopicsOptions().validateOnly(validateOnly));
        r.all().get();
        Config c = r.config(t.name()).get();
        String id;
        try { id = r.topicId(t.name()).get() == null ? "null" : "U"; } catch (ExecutionException e) { id = "ERR " + e.getCause().getClass().getSimpleName(); }
        return "partitions=" + r.numPartitions(t.name()).get() + " rf=" + r.replicationFactor(t.name()).get() + " id=" + id
            + " configs=" + c.entries().size() + " nondefault=" + c.entries().stream().filter(e -> !e.isDefault()).map(e -> e.name() + "=" + e.value()).sorted().collect(Collectors.toList());
    }

    static String offsets(Map<TopicPartition, OffsetSpec> m, IsolationLevel level) throws Exception {
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r = admin.listOffsets(m, new ListOffsetsOptions(level)).all().get();
        TreeMap<String, String> out = new TreeMap<>();
        r.forEach((k, v) -> out.put(tp(k), v.offset() + "@" + (v.timestamp() > 1_000_000_000_000L ? "T" : Long.toString(v.timestamp())) + (v.leaderEpoch().isPresent() ? "e" + v.leaderEpoch().get() : "")));
        return out.toString();
    }

    static Properties clientProps() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    static KafkaProducer<String, String> producer(String txnId) {
        Properties p = clientProps();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        if (txnId != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String group, String protocol, String instance) {
        Properties p = clientProps();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (instance != null) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
        return new KafkaConsumer<>(p);
    }

    static void joined(KafkaConsumer<String, String> c, String topic) {
        c.subscribe(List.of(topic));
        long deadline = System.currentTimeMillis() + 30_000;
        while (c.assignment().isEmpty() && System.currentTimeMillis() < deadline) c.poll(Duration.ofMillis(100));
        if (c.assignment().isEmpty()) throw new IllegalStateException("no assignment");
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        Set<String> sections = new HashSet<>(Arrays.asList(args).subList(1, args.length));
        Properties ap = clientProps();
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "4000");
        admin = Admin.create(ap);
        try {
            DescribeClusterResult dc = admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true));
            brokerId = dc.nodes().get().iterator().next().id();
            step("cluster", () -> "nodes=" + nodes(dc.nodes().get()) + " controller=" + node(dc.controller().get()) + " clusterId=" + (dc.clusterId().get() != null) + " ops=" + ops(dc.authorizedOperations().get()));
            step("cluster.noOps", () -> ops(admin.describeCluster().authorizedOperations().get()));
            if (sections.isEmpty() || sections.contains("topics")) topics();
            if (sections.isEmpty() || sections.contains("configs")) configs();
            if (sections.isEmpty() || sections.contains("records")) records();
            if (sections.isEmpty() || sections.contains("groups")) groups();
            if (sections.isEmpty() || sections.contains("share")) share();
            if (sections.isEmpty() || sections.contains("txn")) transactions();
            if (sections.isEmpty() || sections.contains("misc")) misc();
            if (sections.isEmpty() || sections.contains("delete")) deletes();
        } finally {
            for (AutoCloseable c : open) try {
                if (c instanceof KafkaProducer) ((KafkaProducer<?, ?>) c).close(Duration.ofSeconds(3));
                else if (c instanceof KafkaConsumer) ((KafkaConsumer<?, ?>) c).close(Duration.ofSeconds(3));
                else if (c instanceof KafkaShareConsumer) ((KafkaShareConsumer<?, ?>) c).close(Duration.ofSeconds(3));
            } catch (Exception e) { /* best effort */ }
            admin.close(Duration.ofSeconds(5));
        }
    }

    static void topics() throws Exception {
        String a = P + "a";
        step("create.a", () -> create(new NewTopic(a, 3, (short) 1), false));
        step("create.validateOnly", () -> create(new NewTopic(P + "v", 2, (short) 1), true));
        step("create.validateOnly.notListed", () -> admin.listTopics().names().get().contains(P + "v"));
        step("create.exists", () -> create(new NewTopic(a, 3, (short) 1), false));
        step("create.exists.validateOnly", () -> create(new NewTopic(a, 3, (short) 1), true));
        for (String bad : List.of("bad/name", ".", "..", "x".repeat(250), "has space"))
            step("create.invalidName." + (bad.length() > 20 ? "long" : bad), () -> create(new NewTopic(bad, 1, (short) 1), false));
        step("create.defaults", () -> create(new NewTopic(P + "d", Optional.empty(), Optional.empty()), false));
        step("create.badConfigValue", () -> create(new NewTopic(P + "bc", 1, (short) 1).configs(Map.of("retention.ms", "abc")), false));
        step("create.unknownConfig", () -> create(new NewTopic(P + "uc", 1, (short) 1).configs(Map.of("no.such.config", "1")), false));
        step("create.badCleanupPolicy", () -> create(new NewTopic(P + "cp", 1, (short) 1).configs(Map.of("cleanup.policy", "shred")), false));
        step("create.withConfigs", () -> create(new NewTopic(P + "c", 1, (short) 1).configs(Map.of("retention.ms", "12345", "cleanup.policy", "compact")), false));
        step("create.rf3", () -> create(new NewTopic(P + "rf3", 1, (short) 3), false));
        step("create.rf0", () -> create(new NewTopic(P + "rf0", 1, (short) 0), false));
        step("create.partitions0", () -> create(new NewTopic(P + "p0", 0, (short) 1), false));
        step("create.assignment", () -> create(new NewTopic(P + "as", Map.of(0, List.of(brokerId), 1, List.of(brokerId))), false));
        step("create.assignment.unknownBroker", () -> create(new NewTopic(P + "as2", Map.of(0, List.of(99))), false));
        step("create.assignment.duplicate", () -> create(new NewTopic(P + "as3", Map.of(0, List.of(brokerId, brokerId))), false));
        step("create.assignment.gap", () -> create(new NewTopic(P + "as4", Map.of(0, List.of(brokerId), 2, List.of(brokerId))), false));
        step("create.assignment.empty", () -> create(new NewTopic(P + "as5", Map.of(0, List.<Integer>of())), false));
        step("create.collides", () -> create(new NewTopic("probe_a", 1, (short) 1), false));
        step("create.batch", () -> {
            CreateTopicsResult r = admin.createTopics(List.of(new NewTopic(P + "b1", 1, (short) 1), new NewTopic(P + "b2", 1, (short) 9), new NewTopic(a, 1, (short) 1)));
            TreeMap<String, String> m = new TreeMap<>();
            r.values().forEach((k, f) -> { try { f.get(); m.put(k, "ok"); } catch (Exception e) { m.put(k, e.getCause().getClass().getSimpleName()); } });
            return m;
        });

        step("list", () -> sorted(admin.listTopics().names().get().stream().filter(n -> n.startsWith(P)).collect(Collectors.toList())));
        step("list.listings", () -> sorted(admin.listTopics().listings().get().stream().filter(n -> n.name().startsWith(P)).map(l -> l.name() + ":" + l.isInternal() + ":" + (l.topicId() != null)).collect(Collectors.toList())));

        step("describe.a", () -> topic(admin.describeTopics(List.of(a)).allTopicNames().get().get(a)));
        step("describe.a.ops", () -> topic(admin.describeTopics(List.of(a), new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames().get().get(a)));
        step("describe.paged", () -> admin.describeTopics(List.of(a, P + "as", P + "c"), new DescribeTopicsOptions().partitionSizeLimitPerResponse(2))
            .allTopicNames().get().values().stream().map(AdminProbe::topic).sorted().collect(Collectors.toList()));
        step("describe.paged1", () -> admin.describeTopics(List.of(a, P + "as"), new DescribeTopicsOptions().partitionSizeLimitPerResponse(1))
            .allTopicNames().get().values().stream().map(AdminProbe::topic).sorted().collect(Collectors.toList()));
        step("describe.unknown", () -> topic(admin.describeTopics(List.of(P + "nope")).allTopicNames().get().get(P + "nope")));
        step("describe.mixed", () -> {
            TreeMap<String, String> m = new TreeMap<>();
            admin.describeTopics(List.of(a, P + "nope2")).topicNameValues().forEach((k, f) -> { try { f.get(); m.put(k, "ok"); } catch (Exception e) { m.put(k, e.getCause().getClass().getSimpleName()); } });
            return m;
        });
        step("describe.invalidName", () -> topic(admin.describeTopics(List.of("bad/name")).allTopicNames().get().get("bad/name")));
        step("describe.byId", () -> {
            Uuid id = admin.describeTopics(List.of(a)).allTopicNames().get().get(a).topicId();
            return topic(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get().get(id));
        });
        step("describe.byUnknownId", () -> {
            Uuid id = Uuid.randomUuid();
            return topic(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get().get(id));
        });

        step("partitions.validateOnly", () -> { admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5)), new CreatePartitionsOptions().validateOnly(true)).all().get();
            return admin.describeTopics(List.of(a)).allTopicNames().get().get(a).partitions().size(); });
        step("partitions.increase", () -> { admin.createPartitions(Map.of(a, NewPartitions.increaseTo(4))).all().get();
            return admin.describeTopics(List.of(a)).allTopicNames().get().get(a).partitions().size(); });
        step("partitions.fewer", () -> { admin.createPartitions(Map.of(a, NewPartitions.increaseTo(2))).all().get(); return ""; });
        step("partitions.same", () -> { admin.createPartitions(Map.of(a, NewPartitions.increaseTo(4))).all().get(); return ""; });
        step("partitions.unknown", () -> { admin.createPartitions(Map.of(P + "nope", NewPartitions.increaseTo(4))).all().get(); return ""; });
        step("partitions.assignment", () -> { admin.createPartitions(Map.of(P + "as", NewPartitions.increaseTo(3, List.of(List.of(brokerId))))).all().get(); return ""; });
        step("partitions.assignment.unknownBroker", () -> { admin.createPartitions(Map.of(P + "as", NewPartitions.increaseTo(4, List.of(List.of(99))))).all().get(); return ""; });
        step("partitions.assignment.wrongCount", () -> { admin.createPartitions(Map.of(P + "as", NewPartitions.increaseTo(5, List.of(List.of(brokerId))))).all().get(); return ""; });
        step("partitions.assignment.wrongRf", () -> { admin.createPartitions(Map.of(P + "as", NewPartitions.increaseTo(4, List.of(List.of())))).all().get(); return ""; });
    }

    static void configs() throws Exception {
        String a = P + "cfg";
        admin.createTopics(List.of(new NewTopic(a, 1, (short) 1))).all().get();
        ConfigResource t = topicRes(a);
        step("configs.topic", () -> config(t, true, false, null));
        step("configs.topic.detail", () -> config(t, true, true, Set.of("retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas", "message.timestamp.type", "max.message.bytes")));
        step("configs.topic.unknown", () -> config(topicRes(P + "nope"), true, false, null));
        step("configs.topic.invalidName", () -> config(topicRes("bad/name"), true, false, null));
        ConfigResource b = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(brokerId));
        step("configs.broker.names", () -> config(b, false, false, null));
        step("configs.broker.detail", () -> config(b, true, true, Set.of("log.retention.hours", "log.retention.ms", "num.partitions", "auto.create.topics.enable", "message.max.bytes", "log.cleaner.threads", "compression.type")));
        ConfigResource bd = new ConfigResource(ConfigResource.Type.BROKER, "");
        step("configs.brokerDefault", () -> config(bd, true, false, null));
        step("configs.broker.bad", () -> config(new ConfigResource(ConfigResource.Type.BROKER, "abc"), true, false, null));
        ConfigResource bl = new ConfigResource(ConfigResource.Type.BROKER_LOGGER, Integer.toString(brokerId));
        step("configs.brokerLogger.root", () -> config(bl, true, false, Set.of("root")));
        ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, P + "g-cfg");
        step("configs.group", () -> config(g, true, false, null));
        ConfigResource cm = new ConfigResource(ConfigResource.Type.CLIENT_METRICS, P + "cm");
        step("configs.clientMetrics.unknown", () -> config(cm, true, false, null));

        step("alter.topic.set", () -> alter(t, false, set("retention.ms", "1000")) + config(t, true, false, Set.of("retention.ms")));
        step("alter.topic.validateOnly", () -> alter(t, true, set("retention.ms", "2000")) + config(t, true, false, Set.of("retention.ms")));
        step("alter.topic.badValue", () -> alter(t, false, set("retention.ms", "abc")));
        step("alter.topic.unknownName", () -> alter(t, false, set("no.such.config", "1")));
        step("alter.topic.badRange", () -> alter(t, false, set("min.insync.replicas", "0")));
        step("alter.topic.mixBadGood", () -> alter(t, false, set("retention.ms", "5000"), set("segment.bytes", "10")) + config(t, true, false, Set.of("retention.ms")));
        step("alter.topic.duplicateKey", () -> alter(t, false, set("retention.ms", "5000"), set("retention.ms", "6000")));
        step("alter.topic.delete", () -> alter(t, false, op("retention.ms", null, AlterConfigOp.OpType.DELETE)) + config(t, true, false, Set.of("retention.ms")));
        step("alter.topic.deleteUnknown", () -> alter(t, false, op("no.such.config", null, AlterConfigOp.OpType.DELETE)));
        step("alter.topic.append", () -> alter(t, false, op("cleanup.policy", "compact", AlterConfigOp.OpType.APPEND)) + config(t, true, false, Set.of("cleanup.policy")));
        step("alter.topic.appendExisting", () -> alter(t, false, op("cleanup.policy", "compact", AlterConfigOp.OpType.APPEND)) + config(t, true, false, Set.of("cleanup.policy")));
        step("alter.topic.subtract", () -> alter(t, false, op("cleanup.policy", "delete", AlterConfigOp.OpType.SUBTRACT)) + config(t, true, false, Set.of("cleanup.policy")));
        step("alter.topic.subtractAll", () -> alter(t, false, op("cleanup.policy", "compact", AlterConfigOp.OpType.SUBTRACT)) + config(t, true, false, Set.of("cleanup.policy")));
        step("alter.topic.appendNonList", () -> alter(t, false, op("retention.ms", "5", AlterConfigOp.OpType.APPEND)));
        step("alter.topic.subtractNonList", () -> alter(t, false, op("retention.ms", "5", AlterConfigOp.OpType.SUBTRACT)));
        step("alter.topic.appendThrottled", () -> alter(t, false, op("leader.replication.throttled.replicas", "0:" + brokerId, AlterConfigOp.OpType.APPEND), op("leader.replication.throttled.replicas", "1:" + brokerId, AlterConfigOp.OpType.APPEND)) + config(t, true, false, Set.of("leader.replication.throttled.replicas")));
        step("alter.topic.unknownTopic", () -> alter(topicRes(P + "nope"), false, set("retention.ms", "1000")));
        step("alter.broker.dynamic", () -> alter(b, false, set("log.cleaner.threads", "2")) + settle() + config(b, true, false, Set.of("log.cleaner.threads")));
        step("alter.broker.readOnly", () -> alter(b, false, set("log.dirs", "/tmp/x")));
        step("alter.broker.unknown", () -> alter(b, false, set("no.such.config", "1")));
        step("alter.broker.badValue", () -> alter(b, false, set("log.cleaner.threads", "abc")));
        step("alter.brokerDefault", () -> alter(bd, false, set("log.retention.ms", "604800000")) + settle() + config(bd, true, false, null));
        step("alter.brokerDefault.delete", () -> alter(bd, false, op("log.retention.ms", null, AlterConfigOp.OpType.DELETE)) + settle() + config(bd, true, false, null));
        step("alter.broker.delete", () -> alter(b, false, op("log.cleaner.threads", null, AlterConfigOp.OpType.DELETE)) + settle() + config(b, true, false, Set.of("log.cleaner.threads")));
        step("alter.brokerLogger.root", () -> alter(bl, false, set("root", "INFO")));
        step("alter.brokerLogger.badLevel", () -> alter(bl, false, set("root", "LOUD")));
        step("alter.brokerLogger.append", () -> alter(bl, false, op("root", "INFO", AlterConfigOp.OpType.APPEND)));
        step("alter.brokerLogger.deleteRoot", () -> alter(bl, false, op("root", null, AlterConfigOp.OpType.DELETE)));
        step("alter.brokerLogger.unknownLogger", () -> alter(bl, false, set("no.such.logger", "INFO")));
        step("alter.brokerLogger.validateOnly", () -> alter(bl, true, set("root", "ERROR")) + config(bl, true, false, Set.of("root")));
        step("configs.brokerLogger.afterSet", () -> config(bl, true, false, Set.of("root")));
        step("alter.group.set", () -> alter(g, false, set("consumer.session.timeout.ms", "50000")) + config(g, true, false, Set.of("consumer.session.timeout.ms")));
        step("alter.group.bad", () -> alter(g, false, set("consumer.session.timeout.ms", "1")));
        step("alter.group.unknown", () -> alter(g, false, set("no.such.config", "1")));
        step("alter.clientMetrics.set", () -> alter(cm, false, set("metrics", "org.apache.kafka.producer"), set("interval.ms", "10000")) + config(cm, true, false, null));
        step("alter.clientMetrics.badInterval", () -> alter(cm, false, set("interval.ms", "10")));
        step("alter.clientMetrics.unknown", () -> alter(cm, false, set("no.such.config", "1")));
        step("alter.clientMetrics.append", () -> alter(cm, false, op("metrics", "org.apache.kafka.consumer", AlterConfigOp.OpType.APPEND)) + config(cm, true, false, Set.of("metrics")));
        step("listConfigResources.clientMetrics", () -> sorted(admin.listConfigResources(Set.of(ConfigResource.Type.CLIENT_METRICS), new ListConfigResourcesOptions()).all().get()));
        step("listConfigResources.all", () -> sorted(admin.listConfigResources().all().get().stream().filter(r -> r.name().startsWith(P) || r.type() != ConfigResource.Type.TOPIC).collect(Collectors.toList())));
        step("listConfigResources.group", () -> sorted(admin.listConfigResources(Set.of(ConfigResource.Type.GROUP), new ListConfigResourcesOptions()).all().get()));
    }

    static void records() throws Exception {
        String a = P + "rec";
        admin.createTopics(List.of(new NewTopic(a, 2, (short) 1))).all().get();
        try (KafkaProducer<String, String> p = producer(null)) {
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(a, 0, 1000L + (i * 7 % 10), "k" + i, "v" + i)).get();
        }
        TopicPartition p0 = new TopicPartition(a, 0), p1 = new TopicPartition(a, 1), p9 = new TopicPartition(a, 9);
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("maxTimestamp", OffsetSpec.maxTimestamp());
        specs.put("forTimestamp", OffsetSpec.forTimestamp(1004));
        specs.put("forTimestampFuture", OffsetSpec.forTimestamp(9_000_000_000_000L));
        specs.put("earliestLocal", OffsetSpec.earliestLocal());
        specs.put("latestTiered", OffsetSpec.latestTiered());
        for (Map.Entry<String, OffsetSpec> e : specs.entrySet()) {
            step("offsets." + e.getKey(), () -> offsets(Map.of(p0, e.getValue(), p1, e.getValue()), IsolationLevel.READ_UNCOMMITTED));
        }
        step("offsets.readCommitted", () -> offsets(Map.of(p0, OffsetSpec.latest()), IsolationLevel.READ_COMMITTED));
        step("offsets.unknownPartition", () -> offsets(Map.of(p9, OffsetSpec.latest()), IsolationLevel.READ_UNCOMMITTED));
        step("offsets.unknownTopic", () -> offsets(Map.of(new TopicPartition(P + "nope", 0), OffsetSpec.latest()), IsolationLevel.READ_UNCOMMITTED));

        step("deleteRecords.3", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(3))).lowWatermarks().get(p0).get().lowWatermark());
        step("deleteRecords.beyondHW", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(100))).lowWatermarks().get(p0).get().lowWatermark());
        step("deleteRecords.backwards", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(1))).lowWatermarks().get(p0).get().lowWatermark());
        step("deleteRecords.unknownPartition", () -> admin.deleteRecords(Map.of(p9, RecordsToDelete.beforeOffset(1))).lowWatermarks().get(p9).get().lowWatermark());
        step("deleteRecords.unknownTopic", () -> { TopicPartition u = new TopicPartition(P + "nope", 0); return admin.deleteRecords(Map.of(u, RecordsToDelete.beforeOffset(1))).lowWatermarks().get(u).get().lowWatermark(); });
        step("deleteRecords.hw", () -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(-1))).lowWatermarks().get(p0).get().lowWatermark());
        step("offsets.afterDelete", () -> offsets(Map.of(p0, OffsetSpec.earliest(), p1, OffsetSpec.earliest()), IsolationLevel.READ_UNCOMMITTED));
        step("offsets.maxTimestampAfterDelete", () -> offsets(Map.of(p0, OffsetSpec.maxTimestamp()), IsolationLevel.READ_UNCOMMITTED));

        step("logDirs", () -> {
            Map<Integer, Map<String, LogDirDescription>> all = admin.describeLogDirs(List.of(brokerId)).allDescriptions().get();
            List<String> out = new ArrayList<>();
            all.forEach((id, dirs) -> dirs.forEach((dir, d) -> out.add(nid(id) + ":dir error=" + (d.error() == null ? "none" : d.error().getClass().getSimpleName())
                + " total=" + d.totalBytes().isPresent() + " usable=" + d.usableBytes().isPresent() + " replicas="
                + d.replicaInfos().entrySet().stream().filter(e -> e.getKey().topic().startsWith(P + "rec")).map(e -> tp(e.getKey()) + ":" + (e.getValue().size() > 0 ? "+" : "0") + ":" + e.getValue().offsetLag() + ":" + e.getValue().isFuture()).sorted().collect(Collectors.toList()))));
            return out;
        });
        step("logDirs.unknownBroker", () -> admin.describeLogDirs(List.of(99)).allDescriptions().get().size());
        step("replicaLogDirs", () -> {
            TopicPartitionReplica r = new TopicPartitionReplica(a, 0, brokerId);
            DescribeReplicaLogDirsResult.ReplicaLogDirInfo i = admin.describeReplicaLogDirs(List.of(r)).all().get().get(r);
            return "current=" + (i.getCurrentReplicaLogDir() != null) + " future=" + i.getFutureReplicaLogDir() + " lag=" + i.getCurrentReplicaOffsetLag() + "/" + i.getFutureReplicaOffsetLag();
        });
        step("replicaLogDirs.unknown", () -> {
            TopicPartitionReplica r = new TopicPartitionReplica(P + "nope", 0, brokerId);
            DescribeReplicaLogDirsResult.ReplicaLogDirInfo i = admin.describeReplicaLogDirs(List.of(r)).all().get().get(r);
            return "current=" + i.getCurrentReplicaLogDir() + " future=" + i.getFutureReplicaLogDir();
        });
        step("alterReplicaLogDirs.unknownDir", () -> { admin.alterReplicaLogDirs(Map.of(new TopicPartitionReplica(a, 0, brokerId), "/no/such/dir")).all().get(); return ""; });

        step("elect.preferred", () -> result(admin.electLeaders(ElectionType.PREFERRED, Set.of(p0)).partitions().get()));
        step("elect.unclean", () -> result(admin.electLeaders(ElectionType.UNCLEAN, Set.of(p0)).partitions().get()));
        step("elect.unknown", () -> result(admin.electLeaders(ElectionType.PREFERRED, Set.of(p9, new TopicPartition(P + "nope", 0))).partitions().get()));
        step("elect.all", () -> admin.electLeaders(ElectionType.PREFERRED, null).partitions().get().entrySet().stream().filter(e -> e.getKey().topic().startsWith(P)).count());
        step("elect.all.all", () -> { admin.electLeaders(ElectionType.PREFERRED, Set.of(p0)).all().get(); return ""; });

        step("reassign.same", () -> { admin.alterPartitionReassignments(Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(brokerId))))).all().get(); return ""; });
        step("reassign.unknownBroker", () -> { admin.alterPartitionReassignments(Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(99))))).all().get(); return ""; });
        step("reassign.empty", () -> { admin.alterPartitionReassignments(Map.of(p0, Optional.of(new NewPartitionReassignment(List.of())))).all().get(); return ""; });
        step("reassign.cancel", () -> { admin.alterPartitionReassignments(Map.of(p0, Optional.empty())).all().get(); return ""; });
        step("reassign.unknownTopic", () -> { admin.alterPartitionReassignments(Map.of(new TopicPartition(P + "nope", 0), Optional.of(new NewPartitionReassignment(List.of(brokerId))))).all().get(); return ""; });
        step("reassign.unknownPartition", () -> { admin.alterPartitionReassignments(Map.of(p9, Optional.of(new NewPartitionReassignment(List.of(brokerId))))).all().get(); return ""; });
        step("reassign.list", () -> admin.listPartitionReassignments().reassignments().get());
        step("reassign.list.some", () -> admin.listPartitionReassignments(Set.of(p0, p9)).reassignments().get());
    }

    static String result(Map<TopicPartition, Optional<Throwable>> m) {
        TreeMap<String, String> out = new TreeMap<>();
        m.forEach((k, v) -> out.put(tp(k), v.map(t -> t.getClass().getSimpleName()).orElse("ok")));
        return out.toString();
    }

    static String group(ConsumerGroupDescription d) {
        return d.groupId() + " simple=" + d.isSimpleConsumerGroup() + " state=" + d.groupState() + " type=" + d.type() + " assignor=" + d.partitionAssignor()
            + " coordinator=" + node(d.coordinator()) + " ops=" + ops(d.authorizedOperations()) + " epoch=" + d.groupEpoch() + "/" + d.targetAssignmentEpoch()
            + " members=" + d.members().stream().map(m -> "[instance=" + m.groupInstanceId() + " client=" + (m.clientId().isEmpty() ? "empty" : "set")
                + " host=" + (m.host().isEmpty() ? "empty" : "set") + " assigned=" + m.assignment().topicPartitions().stream().map(AdminProbe::tp).sorted().collect(Collectors.toList())
                + " target=" + m.targetAssignment().map(t -> t.topicPartitions().stream().map(AdminProbe::tp).sorted().collect(Collectors.toList()).toString()).orElse("none")
                + " epoch=" + m.memberEpoch() + " upgraded=" + m.upgraded() + "]").sorted().collect(Collectors.toList());
    }

    static String groups(Map<String, KafkaFuture<ConsumerGroupDescription>> m) {
        TreeMap<String, String> out = new TreeMap<>();
        m.forEach((k, f) -> { try { out.put(k, group(f.get())); } catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); } });
        return out.toString();
    }

    static <T> String futures(Map<String, KafkaFuture<T>> m) {
        TreeMap<String, String> out = new TreeMap<>();
        m.forEach((k, f) -> { try { out.put(k, String.valueOf(f.get())); } catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); } });
        return out.toString();
    }

    static String offsetsOf(Map<TopicPartition, OffsetAndMetadata> m) {
        TreeMap<String, String> out = new TreeMap<>();
        m.forEach((k, v) -> out.put(tp(k), v == null ? "null" : v.offset() + ":" + v.metadata() + ":" + v.leaderEpoch()));
        return out.toString();
    }

    static String listings(Collection<GroupListing> c) {
        return c.stream().filter(g -> g.groupId().startsWith(P)).map(g -> g.groupId() + ":" + g.type() + ":" + g.protocol() + ":" + g.groupState() + ":" + g.isSimpleConsumerGroup()).sorted().collect(Collectors.toList()).toString();
    }

    static void groups() throws Exception {
        String t = P + "grp";
        admin.createTopics(List.of(new NewTopic(t, 2, (short) 1))).all().get();
        String classic = P + "g-classic", modern = P + "g-consumer", stat = P + "g-static", simple = P + "g-simple";
        KafkaConsumer<String, String> c1 = consumer(classic, "classic", null);
        open.add(c1);
        joined(c1, t);
        c1.commitSync(Map.of(new TopicPartition(t, 0), new OffsetAndMetadata(0, "meta")));
        KafkaConsumer<String, String> c2 = consumer(modern, "consumer", null);
        open.add(c2);
        joined(c2, t);
        c2.commitSync(Map.of(new TopicPartition(t, 1), new OffsetAndMetadata(0, "m2")));
        KafkaConsumer<String, String> c3 = consumer(stat, "classic", "inst-1");
        open.add(c3);
        joined(c3, t);
        step("simple.commit", () -> { admin.alterConsumerGroupOffsets(simple, Map.of(new TopicPartition(t, 0), new OffsetAndMetadata(1, "s"))).all().get(); return ""; });

        step("groups.list", () -> listings(admin.listGroups().all().get()));
        step("groups.list.consumer", () -> listings(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get()));
        step("groups.list.stable", () -> listings(admin.listGroups(ListGroupsOptions.forConsumerGroups().inGroupStates(Set.of(GroupState.STABLE))).all().get()));
        step("groups.list.empty", () -> listings(admin.listGroups(new ListGroupsOptions().inGroupStates(Set.of(GroupState.EMPTY))).all().get()));
        step("groups.list.typeClassic", () -> listings(admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.CLASSIC))).all().get()));
        step("groups.list.typeConsumer", () -> listings(admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.CONSUMER))).all().get()));
        step("groups.list.typeShare", () -> listings(admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()));
        step("groups.describe", () -> groups(admin.describeConsumerGroups(List.of(classic, modern, stat, simple, P + "g-none")).describedGroups()));
        step("groups.describe.ops", () -> groups(admin.describeConsumerGroups(List.of(classic, modern), new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).describedGroups()));
        step("groups.describeClassic", () -> {
            TreeMap<String, String> out = new TreeMap<>();
            admin.describeClassicGroups(List.of(classic, modern, simple, P + "g-none")).describedGroups().forEach((k, f) -> {
                try { ClassicGroupDescription d = f.get(); out.put(k, d.protocol() + ":" + d.protocolData() + ":" + d.state() + ":" + d.members().size() + ":" + node(d.coordinator())); }
                catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); }
            });
            return out;
        });
        step("groups.offsets.several", () -> {
            Map<String, ListConsumerGroupOffsetsSpec> specs = new HashMap<>();
            specs.put(classic, new ListConsumerGroupOffsetsSpec());
            specs.put(modern, new ListConsumerGroupOffsetsSpec());
            specs.put(simple, new ListConsumerGroupOffsetsSpec().topicPartitions(List.of(new TopicPartition(t, 0), new TopicPartition(t, 1))));
            specs.put(P + "g-none", new ListConsumerGroupOffsetsSpec());
            ListConsumerGroupOffsetsResult r = admin.listConsumerGroupOffsets(specs);
            TreeMap<String, String> out = new TreeMap<>();
            for (String g : specs.keySet()) {
                try { out.put(g, offsetsOf(r.partitionsToOffsetAndMetadata(g).get())); } catch (Exception e) { out.put(g, "ERR " + e.getCause().getClass().getSimpleName()); }
            }
            return out;
        });
        step("groups.offsets.unknownTopic", () -> offsetsOf(admin.listConsumerGroupOffsets(Map.of(classic, new ListConsumerGroupOffsetsSpec().topicPartitions(List.of(new TopicPartition(P + "nope", 0))))).partitionsToOffsetAndMetadata(classic).get()));
        step("groups.alterOffsets.activeClassic", () -> { admin.alterConsumerGroupOffsets(classic, Map.of(new TopicPartition(t, 0), new OffsetAndMetadata(1))).all().get(); return ""; });
        step("groups.alterOffsets.activeConsumer", () -> { admin.alterConsumerGroupOffsets(modern, Map.of(new TopicPartition(t, 0), new OffsetAndMetadata(1))).all().get(); return ""; });
        step("groups.alterOffsets.unknownTopic", () -> { admin.alterConsumerGroupOffsets(simple, Map.of(new TopicPartition(P + "nope", 0), new OffsetAndMetadata(1))).all().get(); return ""; });
        step("groups.deleteOffsets.subscribed", () -> { admin.deleteConsumerGroupOffsets(classic, Set.of(new TopicPartition(t, 0))).all().get(); return ""; });
        step("groups.deleteOffsets.subscribedConsumer", () -> { admin.deleteConsumerGroupOffsets(modern, Set.of(new TopicPartition(t, 1))).all().get(); return ""; });
        step("groups.deleteOffsets.simple", () -> { admin.deleteConsumerGroupOffsets(simple, Set.of(new TopicPartition(t, 0))).all().get(); return offsetsOf(admin.listConsumerGroupOffsets(simple).partitionsToOffsetAndMetadata().get()); });
        step("groups.deleteOffsets.unknownGroup", () -> { admin.deleteConsumerGroupOffsets(P + "g-none", Set.of(new TopicPartition(t, 0))).all().get(); return ""; });
        step("groups.deleteOffsets.notCommitted", () -> { admin.deleteConsumerGroupOffsets(classic, Set.of(new TopicPartition(P + "nope", 0))).all().get(); return ""; });
        step("groups.removeMembers.unknownInstance", () -> { admin.removeMembersFromConsumerGroup(stat, new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("inst-9")))).all().get(); return ""; });
        step("groups.removeMembers.unknownGroup", () -> { admin.removeMembersFromConsumerGroup(P + "g-none", new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("inst-9")))).all().get(); return ""; });
        step("groups.delete.active", () -> futures(admin.deleteConsumerGroups(List.of(classic, modern, P + "g-none")).deletedGroups()));
        step("groups.removeMembers.static", () -> { admin.removeMembersFromConsumerGroup(stat, new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("inst-1")))).all().get();
            return groups(admin.describeConsumerGroups(List.of(stat)).describedGroups()); });
        step("groups.removeMembers.all", () -> { admin.removeMembersFromConsumerGroup(classic, new RemoveMembersFromConsumerGroupOptions()).all().get();
            return groups(admin.describeConsumerGroups(List.of(classic)).describedGroups()); });
        c2.close(Duration.ofSeconds(10));
        open.remove(c2);
        step("groups.afterLeave", () -> groups(admin.describeConsumerGroups(List.of(modern)).describedGroups()));
        step("groups.alterOffsets.emptyConsumer", () -> { admin.alterConsumerGroupOffsets(modern, Map.of(new TopicPartition(t, 0), new OffsetAndMetadata(2))).all().get(); return offsetsOf(admin.listConsumerGroupOffsets(modern).partitionsToOffsetAndMetadata().get()); });
        step("groups.delete.empty", () -> futures(admin.deleteConsumerGroups(List.of(modern, simple)).deletedGroups()));
        step("groups.list.afterDelete", () -> listings(admin.listGroups().all().get()));
        step("groups.describe.wrongType", () -> {
            TreeMap<String, String> out = new TreeMap<>();
            admin.describeShareGroups(List.of(classic)).describedGroups().forEach((k, f) -> { try { out.put(k, String.valueOf(f.get().groupState())); } catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); } });
            return out;
        });
    }

    static void share() throws Exception {
        String t = P + "shr";
        String g = P + "s-group";
        admin.createTopics(List.of(new NewTopic(t, 2, (short) 1))).all().get();
        try (KafkaProducer<String, String> p = producer(null)) {
            for (int i = 0; i < 4; i++) p.send(new ProducerRecord<>(t, i % 2, "k", "v" + i)).get();
        }
        step("share.describe.unknown", () -> shareGroups(List.of(P + "s-none")));
        step("share.alterOffsets.new", () -> { admin.alterShareGroupOffsets(g, Map.of(new TopicPartition(t, 0), 0L, new TopicPartition(t, 1), 1L)).all().get(); return shareOffsets(g); });
        step("share.describe.empty", () -> shareGroups(List.of(g)));
        Properties p = clientProps();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, g);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        KafkaShareConsumer<String, String> sc = new KafkaShareConsumer<>(p);
        open.add(sc);
        sc.subscribe(List.of(t));
        int got = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        while (got < 3 && System.currentTimeMillis() < deadline) { got += sc.poll(Duration.ofMillis(200)).count(); sc.commitSync(); }
        int seen = got;
        step("share.consumed", () -> seen);
        step("share.describe.active", () -> shareGroups(List.of(g)));
        step("share.list", () -> listings(admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()));
        step("share.offsets", () -> shareOffsets(g));
        step("share.offsets.unknownGroup", () -> shareOffsets(P + "s-none"));
        step("share.alterOffsets.active", () -> { admin.alterShareGroupOffsets(g, Map.of(new TopicPartition(t, 0), 0L)).all().get(); return ""; });
        step("share.deleteOffsets.active", () -> { admin.deleteShareGroupOffsets(g, Set.of(t)).all().get(); return ""; });
        step("share.delete.active", () -> futures(admin.deleteShareGroups(List.of(g)).deletedGroups()));
        sc.close(Duration.ofSeconds(10));
        open.remove(sc);
        step("share.describe.afterLeave", () -> shareGroups(List.of(g)));
        step("share.alterOffsets.unknownTopic", () -> { admin.alterShareGroupOffsets(g, Map.of(new TopicPartition(P + "nope", 0), 0L)).all().get(); return ""; });
        step("share.alterOffsets.unknownPartition", () -> { admin.alterShareGroupOffsets(g, Map.of(new TopicPartition(t, 7), 0L)).all().get(); return ""; });
        step("share.alterOffsets.empty", () -> { admin.alterShareGroupOffsets(g, Map.of(new TopicPartition(t, 0), 1L)).all().get(); return shareOffsets(g); });
        step("share.deleteOffsets.unknownTopic", () -> { admin.deleteShareGroupOffsets(g, Set.of(P + "nope")).all().get(); return ""; });
        step("share.deleteOffsets", () -> { admin.deleteShareGroupOffsets(g, Set.of(t)).all().get(); return shareOffsets(g); });
        step("share.deleteOffsets.unknownGroup", () -> { admin.deleteShareGroupOffsets(P + "s-none", Set.of(t)).all().get(); return ""; });
        step("share.delete", () -> futures(admin.deleteShareGroups(List.of(g, P + "s-none")).deletedGroups()));
        step("share.describe.afterDelete", () -> shareGroups(List.of(g)));
    }

    static String shareGroups(Collection<String> ids) {
        TreeMap<String, String> out = new TreeMap<>();
        admin.describeShareGroups(ids, new DescribeShareGroupsOptions().includeAuthorizedOperations(true)).describedGroups().forEach((k, f) -> {
            try {
                ShareGroupDescription d = f.get();
                out.put(k, d.groupState() + " coordinator=" + node(d.coordinator()) + " ops=" + ops(d.authorizedOperations()) + " epoch=" + d.groupEpoch() + "/" + d.targetAssignmentEpoch()
                    + " members=" + d.members().stream().map(m -> m.assignment().topicPartitions().stream().map(AdminProbe::tp).sorted().collect(Collectors.toList()) + "e" + m.memberEpoch()).sorted().collect(Collectors.toList()));
            } catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); }
        });
        return out.toString();
    }

    static String shareOffsets(String g) throws Exception {
        Map<TopicPartition, SharePartitionOffsetInfo> m = admin.listShareGroupOffsets(Map.of(g, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(g).get();
        TreeMap<String, String> out = new TreeMap<>();
        m.forEach((k, v) -> out.put(tp(k), v == null ? "null" : v.startOffset() + ":" + v.leaderEpoch() + ":" + v.lag()));
        return out.toString();
    }

    static void transactions() throws Exception {
        String t = P + "txn";
        admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all().get();
        TopicPartition p0 = new TopicPartition(t, 0);
        KafkaProducer<String, String> done = producer(P + "tx-done");
        open.add(done);
        done.initTransactions();
        done.beginTransaction();
        done.send(new ProducerRecord<>(t, "k", "v")).get();
        done.commitTransaction();
        KafkaProducer<String, String> hanging = producer(P + "tx-open");
        open.add(hanging);
        hanging.initTransactions();
        hanging.beginTransaction();
        hanging.send(new ProducerRecord<>(t, "k", "v")).get();
        hanging.flush();

        step("txn.list", () -> txns(admin.listTransactions().all().get()));
        step("txn.list.ongoing", () -> txns(admin.listTransactions(new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING))).all().get()));
        step("txn.list.pattern", () -> txns(admin.listTransactions(new ListTransactionsOptions().filterOnTransactionalIdPattern(".*open")).all().get()));
        step("txn.list.badPattern", () -> txns(admin.listTransactions(new ListTransactionsOptions().filterOnTransactionalIdPattern("(")).all().get()));
        step("txn.list.duration", () -> txns(admin.listTransactions(new ListTransactionsOptions().filterOnDuration(3_600_000L)).all().get()));
        step("txn.list.producerIds", () -> txns(admin.listTransactions(new ListTransactionsOptions().filterProducerIds(List.of(123456789L))).all().get()));
        step("txn.describe", () -> {
            TreeMap<String, String> out = new TreeMap<>();
            List<String> ids = List.of(P + "tx-done", P + "tx-open", P + "tx-none");
            DescribeTransactionsResult r = admin.describeTransactions(ids);
            ids.forEach(k -> { KafkaFuture<TransactionDescription> f = r.description(k);
                try { TransactionDescription d = f.get(); out.put(k, d.state() + " coord=" + nid(d.coordinatorId()) + " epoch=" + d.producerEpoch() + " timeout=" + d.transactionTimeoutMs()
                    + " start=" + d.transactionStartTimeMs().isPresent() + " parts=" + d.topicPartitions().stream().map(AdminProbe::tp).sorted().collect(Collectors.toList())); }
                catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); }
            });
            return out;
        });
        step("txn.producers", () -> producers(p0));
        step("txn.producers.unknown", () -> producers(new TopicPartition(P + "nope", 0)));
        step("txn.offsets.readCommitted", () -> offsets(Map.of(p0, OffsetSpec.latest()), IsolationLevel.READ_COMMITTED) + " " + offsets(Map.of(p0, OffsetSpec.latest()), IsolationLevel.READ_UNCOMMITTED));
        step("txn.abort.wrongEpoch", () -> {
            ProducerState s = openProducer(p0);
            admin.abortTransaction(new AbortTransactionSpec(p0, s.producerId(), (short) (s.producerEpoch() + 5), s.coordinatorEpoch().orElse(0))).all().get();
            return producers(p0);
        });
        step("txn.abort", () -> {
            ProducerState s = openProducer(p0);
            admin.abortTransaction(new AbortTransactionSpec(p0, s.producerId(), (short) s.producerEpoch(), s.coordinatorEpoch().orElse(0))).all().get();
            return producers(p0) + " " + offsets(Map.of(p0, OffsetSpec.latest()), IsolationLevel.READ_COMMITTED);
        });
        step("txn.abort.unknownTopic", () -> { admin.abortTransaction(new AbortTransactionSpec(new TopicPartition(P + "nope", 0), 1L, (short) 0, 0)).all().get(); return ""; });
        step("txn.fence", () -> { FenceProducersResult r = admin.fenceProducers(List.of(P + "tx-open", P + "tx-new")); r.all().get();
            return "epochs=" + r.epochId(P + "tx-open").get() + "," + r.epochId(P + "tx-new").get(); });
        step("txn.describe.afterFence", () -> {
            TreeMap<String, String> out = new TreeMap<>();
            List<String> ids = List.of(P + "tx-open", P + "tx-new");
            DescribeTransactionsResult r = admin.describeTransactions(ids);
            ids.forEach(k -> { KafkaFuture<TransactionDescription> f = r.description(k);
                try { TransactionDescription d = f.get(); out.put(k, d.state() + " epoch=" + d.producerEpoch() + " parts=" + d.topicPartitions().size()); }
                catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); }
            });
            return out;
        });
        step("txn.fenced.commit", () -> { hanging.commitTransaction(); return ""; });
    }

    static ProducerState openProducer(TopicPartition p) throws Exception {
        for (ProducerState s : admin.describeProducers(List.of(p)).partitionResult(p).get().activeProducers())
            if (s.currentTransactionStartOffset().isPresent()) return s;
        throw new IllegalStateException("no open transaction");
    }

    static String producers(TopicPartition p) throws Exception {
        return admin.describeProducers(List.of(p)).partitionResult(p).get().activeProducers().stream()
            .map(s -> "epoch=" + s.producerEpoch() + " seq=" + s.lastSequence() + " ts=" + (s.lastTimestamp() > 0) + " coordEpoch=" + s.coordinatorEpoch().isPresent() + " txnStart=" + s.currentTransactionStartOffset())
            .sorted().collect(Collectors.toList()).toString();
    }

    static String txns(Collection<TransactionListing> c) {
        return c.stream().filter(l -> l.transactionalId().startsWith(P)).map(l -> l.transactionalId() + ":" + l.state()).sorted().collect(Collectors.toList()).toString();
    }

    static void misc() throws Exception {
        step("features", () -> {
            FeatureMetadata f = admin.describeFeatures().featureMetadata().get();
            return "finalized=" + new TreeMap<>(f.finalizedFeatures().entrySet().stream().filter(e -> !e.getKey().equals("metadata.version")).collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().minVersionLevel() + "-" + e.getValue().maxVersionLevel())))
                + " supported=" + new TreeMap<>(f.supportedFeatures().entrySet().stream().filter(e -> !e.getKey().equals("metadata.version")).collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().minVersion() + "-" + e.getValue().maxVersion())))
                + " epoch=" + f.finalizedFeaturesEpoch().isPresent();
        });
        step("features.update.unknown", () -> { admin.updateFeatures(Map.of("no.such.feature", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions().validateOnly(true)).all().get(); return ""; });
        step("features.update.same", () -> { admin.updateFeatures(Map.of("group.version", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions().validateOnly(true)).all().get(); return ""; });
        step("features.update.tooHigh", () -> { admin.updateFeatures(Map.of("group.version", new FeatureUpdate((short) 9, FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions().validateOnly(true)).all().get(); return ""; });
        step("features.update.downgradeAsUpgrade", () -> { admin.updateFeatures(Map.of("group.version", new FeatureUpdate((short) 0, FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions().validateOnly(true)).all().get(); return ""; });
        step("features.update.safeDowngrade", () -> { admin.updateFeatures(Map.of("transaction.version", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.SAFE_DOWNGRADE)), new UpdateFeaturesOptions().validateOnly(true)).all().get(); return ""; });

        ClientQuotaEntity u1 = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, P + "u1"));
        step("quotas.alter", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(u1, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1000.0))))).all().get(); return ""; });
        step("quotas.alter.badKey", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(u1, List.of(new ClientQuotaAlteration.Op("no_such_quota", 1000.0))))).all().get(); return ""; });
        step("quotas.alter.badValue", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(u1, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", -5.0))))).all().get(); return ""; });
        step("quotas.alter.ipBadKey", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(Map.of(ClientQuotaEntity.IP, "1.2.3.4")), List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1.0))))).all().get(); return ""; });
        step("quotas.alter.ipBad", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(Map.of(ClientQuotaEntity.IP, "not-an-ip")), List.of(new ClientQuotaAlteration.Op("connection_creation_rate", 1.0))))).all().get(); return ""; });
        step("quotas.alter.ipUser", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(Map.of(ClientQuotaEntity.IP, "1.2.3.4", ClientQuotaEntity.USER, "x")), List.of(new ClientQuotaAlteration.Op("connection_creation_rate", 1.0))))).all().get(); return ""; });
        step("quotas.alter.validateOnly", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, P + "u2")), List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", 5.0)))), new AlterClientQuotasOptions().validateOnly(true)).all().get(); return ""; });
        step("quotas.alter.default", () -> { Map<String, String> m = new HashMap<>(); m.put(ClientQuotaEntity.CLIENT_ID, null);
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(m), List.of(new ClientQuotaAlteration.Op("request_percentage", 50.0))))).all().get(); return ""; });
        step("quotas.describe.all", () -> quotas(ClientQuotaFilter.all()));
        step("quotas.describe.user", () -> quotas(ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, P + "u1")))));
        step("quotas.describe.defaultClient", () -> quotas(ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID)))));
        step("quotas.describe.anyUser", () -> quotas(ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.USER)))));
        step("quotas.describe.unknownType", () -> quotas(ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType("no-such-type")))));
        step("quotas.describe.ipAndUser", () -> quotas(ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.USER), ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.IP)))));
        step("quotas.remove", () -> { admin.alterClientQuotas(List.of(new ClientQuotaAlteration(u1, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all().get(); return quotas(ClientQuotaFilter.all()); });

        step("scram.describe.none", () -> scram(null));
        step("scram.describe.unknown", () -> scram(List.of(P + "nobody")));
        step("scram.alter.lowIterations", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(P + "s1", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1), "pw"))).all().get(); return ""; });
        step("scram.alter.highIterations", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(P + "s1", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 20000), "pw"))).all().get(); return ""; });
        step("scram.alter.emptyUser", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "pw"))).all().get(); return ""; });
        step("scram.alter.ok", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(P + "s1", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "pw"),
            new UserScramCredentialUpsertion(P + "s1", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "pw"))).all().get(); return scram(List.of(P + "s1")); });
        step("scram.alter.duplicate", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(P + "s2", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "pw"),
            new UserScramCredentialDeletion(P + "s2", ScramMechanism.SCRAM_SHA_256))).all().get(); return ""; });
        step("scram.delete.unknown", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(P + "nobody", ScramMechanism.SCRAM_SHA_256))).all().get(); return ""; });
        step("scram.describe.all", () -> scram(null));
        step("scram.delete", () -> { admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(P + "s1", ScramMechanism.SCRAM_SHA_256))).all().get(); return scram(List.of(P + "s1")); });

        step("acls.describe", () -> admin.describeAcls(AclBindingFilter.ANY).values().get().size());
        step("acls.create", () -> { admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, "x", PatternType.LITERAL), new AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW)))).all().get(); return ""; });
        step("acls.delete", () -> admin.deleteAcls(List.of(AclBindingFilter.ANY)).all().get().size());
        step("tokens.create", () -> admin.createDelegationToken().delegationToken().get() != null);
        step("tokens.describe", () -> admin.describeDelegationToken().delegationTokens().get().size());
        step("tokens.renew", () -> admin.renewDelegationToken(new byte[]{1, 2, 3}).expiryTimestamp().get());
        step("tokens.expire", () -> admin.expireDelegationToken(new byte[]{1, 2, 3}).expiryTimestamp().get());
        step("quorum", () -> { QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
            return "leader=" + nid(q.leaderId()) + " voters=" + q.voters().size() + " observers=" + q.observers().size() + " nodes=" + q.nodes().size(); });
        step("streams.describe.unknown", () -> {
            TreeMap<String, String> out = new TreeMap<>();
            admin.describeStreamsGroups(List.of(P + "st-none")).describedGroups().forEach((k, f) -> { try { out.put(k, String.valueOf(f.get().groupState())); } catch (Exception e) { out.put(k, "ERR " + e.getCause().getClass().getSimpleName()); } });
            return out;
        });
        step("registerBroker.unregister", () -> { admin.unregisterBroker(99).all().get(); return ""; });
        step("addRaftVoter", () -> { admin.addRaftVoter(99, Uuid.randomUuid(), Set.of(new RaftVoterEndpoint("CONTROLLER", "localhost", 1))).all().get(); return ""; });
    }

    static String quotas(ClientQuotaFilter f) throws Exception {
        Map<ClientQuotaEntity, Map<String, Double>> m = admin.describeClientQuotas(f).entities().get();
        return new TreeMap<>(m.entrySet().stream().collect(Collectors.toMap(e -> new TreeMap<>(e.getKey().entries()).toString(), e -> new TreeMap<>(e.getValue()).toString()))).toString();
    }

    static String scram(List<String> users) throws Exception {
        DescribeUserScramCredentialsResult r = users == null ? admin.describeUserScramCredentials() : admin.describeUserScramCredentials(users);
        return new TreeMap<>(r.all().get().entrySet().stream().filter(e -> e.getKey().startsWith(P)).collect(Collectors.toMap(Map.Entry::getKey,
            e -> e.getValue().credentialInfos().stream().map(i -> i.mechanism() + ":" + i.iterations()).sorted().collect(Collectors.toList()).toString()))).toString();
    }

    static void deletes() throws Exception {
        String a = P + "del-a", b = P + "del-b";
        admin.createTopics(List.of(new NewTopic(a, 1, (short) 1), new NewTopic(b, 1, (short) 1))).all().get();
        Uuid bid = admin.describeTopics(List.of(b)).allTopicNames().get().get(b).topicId();
        step("delete.byName", () -> futures(admin.deleteTopics(TopicCollection.ofTopicNames(List.of(a, P + "nope"))).topicNameValues()));
        step("delete.byId", () -> { admin.deleteTopics(TopicCollection.ofTopicIds(List.of(bid))).all().get(); return ""; });
        step("delete.byUnknownId", () -> { admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all().get(); return ""; });
        step("delete.invalidName", () -> { admin.deleteTopics(List.of("bad/name")).all().get(); return ""; });
        step("create.internalName", () -> create(new NewTopic("__consumer_offsets", 1, (short) 1), false));
        step("delete.internal", () -> { admin.deleteTopics(List.of("__consumer_offsets")).all().get(); return ""; });
        step("delete.gone", () -> sorted(admin.listTopics().names().get().stream().filter(n -> n.startsWith(P + "del")).collect(Collectors.toList())));
        step("list.internal", () -> sorted(admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get().stream().filter(n -> n.startsWith("__")).collect(Collectors.toList())));
        step("list.noInternal", () -> sorted(admin.listTopics().names().get().stream().filter(n -> n.startsWith("__")).collect(Collectors.toList())));
    }
}
