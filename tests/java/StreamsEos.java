// Kafka Streams with exactly_once_v2 through the kill -9 of one of its two instances.
// The topology: orders re-keyed by customer (a repartition), joined with a customers KTable (a
// state store), re-grouped by region (a second repartition) and aggregated into "count:sum" per
// region (a second store), every update written out (no cache). Standby replicas: 1.
//
//   javac -d CLASSES -cp <kafka + kafka-streams jars> StreamsEos.java
//   java -cp CLASSES:<kafka + kafka-streams jars> StreamsEos drive BOOTSTRAP PREFIX PROTOCOL WORKDIR
//
// runs two instances of itself ("instance" mode) as child JVMs with its own flags and class path
// (hence compiled: the source launcher's classes are on no class path), produces the customers,
// then half the orders, reads the totals with a read_committed consumer, kills one instance with
// SIGKILL, produces the rest and reads again until the totals are complete. Lines starting "[" are the same
// from run to run (diffed between brokers); lines starting "#" are informational (timings, the
// instances' logged errors). PROTOCOL is the group.protocol: classic or streams.

import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

public class StreamsEos {
    static final int CUSTOMERS = 20, REGIONS = 4, ORDERS = 400;
    // orders 3 partitions, customers 4: the join's repartition has 4, so 3 + 4 + 4 active tasks,
    // of which the 8 of the two stateful subtopologies have a standby each.
    static final int ORDER_PARTITIONS = 3, CUSTOMER_PARTITIONS = 4, TOTAL_PARTITIONS = 2;
    static final int ACTIVE_TASKS = ORDER_PARTITIONS + 2 * CUSTOMER_PARTITIONS, STANDBY_TASKS = 2 * CUSTOMER_PARTITIONS;

    static String protocol;

    static void say(String line) {
        System.out.println("[" + protocol + "] " + line);
        System.out.flush();
    }

    static void info(String line) {
        System.out.println("# [" + protocol + "] " + line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        protocol = args[3];
        if (args[0].equals("instance")) {
            instance(args[1], args[2], args[4], args.length > 5 ? args[5] : "eos");
        } else {
            drive(args[1], args[2], Path.of(args[4]));
        }
    }

    // ------------------------------------------------------------------ one Kafka Streams instance

    // variant "eos": the topology above; "regex": a source topic pattern; "static": a group.instance.id.
    static void instance(String bootstrap, String prefix, String stateDir, String variant) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, prefix + (variant.equals("eos") ? "" : "-" + variant) + "-app");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        // Long transactions: the kill leaves one open, for the broker to abort at its timeout.
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        if (protocol.equals("classic")) {
            // The streams protocol takes these from the group's configs instead (set by the driver).
            p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 1);
            p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
            p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        }
        if (variant.equals("static")) {
            p.put(StreamsConfig.consumerPrefix("group.instance.id"), "static-one");
        }
        KafkaStreams streams;
        try {
            streams = new KafkaStreams(variant.equals("regex") ? regexTopology(prefix) : topology(prefix), p);
        } catch (RuntimeException e) {
            System.out.println("UNCAUGHT " + chain(e));
            System.out.flush();
            return;
        }
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + before + " -> " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + chain(e));
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        String shown = "";
        while (true) {  // the tasks held, each time they change; the driver reads them
            Thread.sleep(100);
            Set<String> active = new TreeSet<>(), standby = new TreeSet<>();
            try {
                for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                    t.activeTasks().forEach(m -> active.add(m.taskId().toString()));
                    t.standbyTasks().forEach(m -> standby.add(m.taskId().toString()));
                }
            } catch (RuntimeException e) {
                continue;
            }
            String now = "TASKS " + streams.state() + " active=" + String.join(",", active)
                + " standby=" + String.join(",", standby);
            if (!now.equals(shown)) {
                System.out.println(now);
                System.out.flush();
                shown = now;
            }
        }
    }

    static org.apache.kafka.streams.Topology regexTopology(String prefix) {
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(Pattern.compile(Pattern.quote(prefix) + "-ord.*")).groupByKey().count();
        return b.build();
    }

    // The cause chain: class names and messages, the run's own names masked.
    static String chain(Throwable t) {
        List<String> parts = new ArrayList<>();
        for (; t != null; t = t.getCause()) {
            parts.add(t.getClass().getSimpleName() + "(" + String.valueOf(t.getMessage())
                .replaceAll("s[0-9a-f]{8}", "P").replaceAll("[0-9a-f]{8}-[0-9a-f-]{27}", "UUID") + ")");
        }
        return String.join(" <- ", parts);
    }

    static org.apache.kafka.streams.Topology topology(String prefix) {
        StreamsBuilder b = new StreamsBuilder();
        KTable<String, String> customers = b.table(prefix + "-customers", Materialized.as("customers"));
        b.<String, String>stream(prefix + "-orders")
            .selectKey((order, v) -> v.split(":")[0], Named.as("by-customer"))
            .join(customers, (order, region) -> region + ":" + order.split(":")[1], Joined.as("enrich"))
            .groupBy((customer, v) -> v.split(":")[0], Grouped.as("by-region"))
            .aggregate(() -> "0:0", (region, v, total) -> {
                String[] t = total.split(":");
                return (Long.parseLong(t[0]) + 1) + ":" + (Long.parseLong(t[1]) + Long.parseLong(v.split(":")[1]));
            }, Materialized.as("totals"))
            .toStream()
            .to(prefix + "-totals");
        return b.build();
    }

    // ------------------------------------------------------------------ the driver

    static final class Child {
        final String name;
        final Process process;
        volatile String state = "";
        volatile String uncaught = null;
        final List<String> transitions = Collections.synchronizedList(new ArrayList<>());
        final List<String> timeline = Collections.synchronizedList(new ArrayList<>());
        volatile Set<String> active = Set.of(), standby = Set.of();
        final List<String> errors = Collections.synchronizedList(new ArrayList<>());

        Child(String name, Process process, Path log) {
            this.name = name;
            this.process = process;
            Thread reader = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(process.getInputStream()));
                     PrintWriter out = new PrintWriter(new FileWriter(log.toFile()), true)) {
                    for (String line; (line = in.readLine()) != null; ) {
                        out.println(line);
                        if (line.startsWith("TASKS ")) {
                            String[] f = line.split(" ");
                            state = f[1];
                            active = split(f[2].substring("active=".length()));
                            timeline.add(System.currentTimeMillis() + " " + line);
                            standby = split(f[3].substring("standby=".length()));
                        } else if (line.startsWith("UNCAUGHT ") || line.contains(" ERROR ")) {
                            if (line.startsWith("UNCAUGHT ") && uncaught == null) {
                                uncaught = line.substring("UNCAUGHT ".length());
                            }
                            errors.add(line);
                        } else if (line.startsWith("STATE ")) {
                            transitions.add(line.substring("STATE ".length()));
                            timeline.add(System.currentTimeMillis() + " " + line);
                        }
                    }
                } catch (Exception e) {
                    errors.add("reader: " + e);
                }
            });
            reader.setDaemon(true);
            reader.start();
        }

        static Set<String> split(String tasks) {
            return tasks.isEmpty() ? Set.of() : new TreeSet<>(List.of(tasks.split(",")));
        }

        boolean running() {
            return state.equals("RUNNING");
        }
    }

    static Child start(String name, String bootstrap, String prefix, Path work, String variant) throws Exception {
        // This JVM's flags and class path (the test's), with the instances' own logging.
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        for (String flag : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (!flag.startsWith("-Dlog4j2.configurationFile=")) cmd.add(flag);
        }
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"),
            "-Dlog4j2.configurationFile=" + work.resolve("log4j2.properties"),
            StreamsEos.class.getName(), "instance", bootstrap, prefix, protocol, work.resolve(name).toString(), variant));
        Process process = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        return new Child(name, process, work.resolve(name + ".log"));
    }

    static void await(String what, long timeoutMs, BooleanSupplier done) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(100);
        }
    }

    static void drive(String bootstrap, String prefix, Path work) throws Exception {
        Files.createDirectories(work);
        // The instances' WARN and ERROR lines, and the INFO lines that say what a takeover waits for.
        Files.writeString(work.resolve("log4j2.properties"), String.join("\n",
            "appender.out.type = Console", "appender.out.name = OUT", "appender.out.layout.type = PatternLayout",
            "appender.out.layout.pattern = [%d] %p %m (%c)%n", "rootLogger.level = WARN",
            "rootLogger.appenderRef.out.ref = OUT",
            "logger.restore.name = org.apache.kafka.streams.processor.internals.StoreChangelogReader",
            "logger.restore.level = INFO",
            "logger.offsets.name = org.apache.kafka.clients.consumer.internals",
            "logger.offsets.level = INFO") + "\n");
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        String customers = prefix + "-customers", orders = prefix + "-orders", totals = prefix + "-totals";
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(orders, ORDER_PARTITIONS, (short) 1),
                new NewTopic(customers, CUSTOMER_PARTITIONS, (short) 1),
                new NewTopic(totals, TOTAL_PARTITIONS, (short) 1))).all().get();
            if (protocol.equals("streams")) {
                ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, prefix + "-app");
                admin.incrementalAlterConfigs(Map.of(group, List.of(new AlterConfigOp(
                    new ConfigEntry("streams.num.standby.replicas", "1"), AlterConfigOp.OpType.SET)))).all().get();
            }
        }
        say("topics created");

        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("acks", "all");
        long base = System.currentTimeMillis() - 60_000;  // the customers come before every order
        Map<String, long[]> expected = new TreeMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int c = 0; c < CUSTOMERS; c++) {
                producer.send(new ProducerRecord<>(customers, null, base, "c" + c, "r" + (c % REGIONS)));
            }
            producer.flush();
        }

        List<Child> children = new ArrayList<>();
        children.add(start("one", bootstrap, prefix, work, "eos"));
        children.add(start("two", bootstrap, prefix, work, "eos"));
        Child one = children.get(0), two = children.get(1);
        try {
            long t0 = System.currentTimeMillis();
            await("both instances sharing the tasks", 150_000, () -> one.running() && two.running()
                && !one.active.isEmpty() && !two.active.isEmpty()
                && one.active.size() + two.active.size() == ACTIVE_TASKS
                && union(one.active, two.active).size() == ACTIVE_TASKS
                && union(one.standby, two.standby).size() == STANDBY_TASKS
                && Collections.disjoint(one.active, one.standby) && Collections.disjoint(two.active, two.standby));
            say("two instances running: " + ACTIVE_TASKS + " active tasks split between them, each stateful task"
                + " with a standby on the other instance");
            info("both running after " + (System.currentTimeMillis() - t0) + " ms; one active=" + one.active
                + " standby=" + one.standby + "; two active=" + two.active + " standby=" + two.standby);

            Properties cp = new Properties();
            cp.putAll(common);
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", StringDeserializer.class.getName());
            cp.put("isolation.level", "read_committed");
            Map<String, List<long[]>> seen = new TreeMap<>();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
                 KafkaConsumer<String, String> reader = new KafkaConsumer<>(cp)) {
                List<TopicPartition> parts = new ArrayList<>();
                for (int i = 0; i < TOTAL_PARTITIONS; i++) {
                    parts.add(new TopicPartition(totals, i));
                }
                reader.assign(parts);
                reader.seekToBeginning(parts);

                produceOrders(producer, orders, base, 0, ORDERS / 2, expected);
                readUntil(reader, seen, expected, 120_000);
                say("first half: totals complete, " + ORDERS / 2 + " orders");

                // The second half paced over about three seconds from another thread; the kill
                // lands once its first totals are committed, while both instances process the rest,
                // each in a transaction (committed every second).
                Thread feeder = new Thread(() -> {
                    for (int from = ORDERS / 2; from < ORDERS; from += 5) {
                        produceOrders(producer, orders, base, from, from + 5, expected);
                        try {
                            Thread.sleep(60);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                });
                feeder.start();
                readWhile(reader, seen, () -> seen.values().stream().allMatch(
                    u -> u.get(u.size() - 1)[0] <= ORDERS / 2 / REGIONS), 60_000);
                long killedAt = System.currentTimeMillis();
                two.process.destroyForcibly();  // SIGKILL: no leave, no commit, its transaction left open
                two.process.waitFor();
                say("instance two killed (SIGKILL) mid-stream, exit " + two.process.exitValue());
                try (Admin admin = Admin.create(common)) {
                    info("transactions just after the kill: " + admin.listTransactions().all().get().stream()
                        .filter(t -> t.transactionalId().startsWith(prefix))
                        .map(t -> t.transactionalId().replace(prefix, "P") + "=" + t.state()).sorted().collect(Collectors.joining(" ")));
                }
                feeder.join();
                await("the survivor to hold every active task", 150_000,
                    () -> one.running() && one.active.size() == ACTIVE_TASKS);
                long tookOver = System.currentTimeMillis();
                say("instance one took over: all " + ACTIVE_TASKS + " active tasks");
                readUntil(reader, seen, expected, 150_000);
                reader.poll(Duration.ofSeconds(2)).forEach(r -> seen.get(r.key()).add(new long[] {-1, -1}));  // none more
                info("takeover " + (tookOver - killedAt) + " ms after the kill; totals complete "
                    + (System.currentTimeMillis() - killedAt) + " ms after it; the survivor: " + one.timeline.stream()
                    .filter(l -> Long.parseLong(l.split(" ")[0]) >= killedAt)
                    .map(l -> "+" + (Long.parseLong(l.split(" ")[0]) - killedAt) + " " + l.substring(l.indexOf(' ') + 1))
                    .collect(Collectors.joining("; ")));
                say("second half: totals complete, " + ORDERS + " orders");
            }
            for (Map.Entry<String, long[]> e : expected.entrySet()) {
                List<long[]> updates = seen.getOrDefault(e.getKey(), List.of());
                List<Long> counts = updates.stream().map(u -> u[0]).collect(Collectors.toList());
                boolean inOrder = true;
                for (int i = 0; i < counts.size(); i++) {
                    inOrder &= counts.get(i) == i + 1;
                }
                long[] last = updates.isEmpty() ? new long[] {0, 0} : updates.get(updates.size() - 1);
                say(e.getKey() + ": " + updates.size() + " updates, counts " + (inOrder ? "1.." + counts.size() + " in order"
                    : counts) + ", last " + last[0] + ":" + last[1] + (last[0] == e.getValue()[0]
                    && last[1] == e.getValue()[1] && inOrder && counts.size() == e.getValue()[0] ? " exactly once" : " WRONG, expected "
                    + e.getValue()[0] + ":" + e.getValue()[1]));
            }
            say("instance one " + (one.process.isAlive() ? "still running" : "stopped") + ", state " + one.state);
            if (protocol.equals("streams")) {
                refused(bootstrap, prefix, work, "regex", children);
                refused(bootstrap, prefix, work, "static", children);
            }
        } finally {
            for (Child c : children) {
                c.process.destroyForcibly();
                c.process.waitFor();
            }
            for (Child c : children) {
                info("instance " + c.name + " logged " + c.errors.size() + " errors");
                for (String line : c.errors) {
                    info("  " + c.name + ": " + line);
                }
            }
        }
    }

    // What the streams protocol does not support yet (Kafka 4.3.1): an instance of its own group,
    // started alone; its uncaught exception and final state, or that it runs.
    static void refused(String bootstrap, String prefix, Path work, String variant, List<Child> children)
            throws Exception {
        Child c = start(variant, bootstrap, prefix, work, variant);
        children.add(c);
        long t0 = System.currentTimeMillis();
        while (System.currentTimeMillis() - t0 < 60_000 && c.uncaught == null && !c.running()
               && c.process.isAlive()) {
            Thread.sleep(100);
        }
        Thread.sleep(500);  // the state it settles in after the exception
        say(variant + ": " + (c.uncaught != null ? c.uncaught : c.running() ? "running" : "no answer")
            + (c.transitions.isEmpty() ? "" : ", states " + String.join(", ", c.transitions)));
        c.process.destroyForcibly();
        c.process.waitFor();
    }

    static Set<String> union(Set<String> a, Set<String> b) {
        Set<String> u = new TreeSet<>(a);
        u.addAll(b);
        return u;
    }

    static void produceOrders(KafkaProducer<String, String> producer, String topic, long base, int from, int to,
                              Map<String, long[]> expected) {
        for (int i = from; i < to; i++) {
            int customer = i % CUSTOMERS;
            long amount = i % 7 + 1;
            producer.send(new ProducerRecord<>(topic, null, base + 1000 + i, "o" + i, "c" + customer + ":" + amount));
            long[] e = expected.computeIfAbsent("r" + (customer % REGIONS), r -> new long[2]);
            e[0] += 1;
            e[1] += amount;
        }
        producer.flush();
    }

    // Polls the totals until each region's last update is its expected count:sum.
    static void readUntil(KafkaConsumer<String, String> reader, Map<String, List<long[]>> seen,
                          Map<String, long[]> expected, long timeoutMs) {
        readWhile(reader, seen, () -> !complete(seen, expected), timeoutMs);
    }

    static void readWhile(KafkaConsumer<String, String> reader, Map<String, List<long[]>> seen,
                          BooleanSupplier condition, long timeoutMs) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (condition.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out reading the totals, at " + last(seen));
            }
            for (ConsumerRecord<String, String> r : reader.poll(Duration.ofMillis(50))) {
                String[] v = r.value().split(":");
                seen.computeIfAbsent(r.key(), k -> new ArrayList<>())
                    .add(new long[] {Long.parseLong(v[0]), Long.parseLong(v[1])});
            }
        }
    }

    static boolean complete(Map<String, List<long[]>> seen, Map<String, long[]> expected) {
        for (Map.Entry<String, long[]> e : expected.entrySet()) {
            List<long[]> u = seen.get(e.getKey());
            if (u == null || u.isEmpty()) {
                return false;
            }
            long[] last = u.get(u.size() - 1);
            if (last[0] != e.getValue()[0] || last[1] != e.getValue()[1]) {
                return false;
            }
        }
        return true;
    }

    static String last(Map<String, List<long[]>> seen) {
        return seen.entrySet().stream().map(e -> {
            long[] l = e.getValue().get(e.getValue().size() - 1);
            return e.getKey() + "=" + l[0] + ":" + l[1];
        }).collect(Collectors.joining(" "));
    }
}
