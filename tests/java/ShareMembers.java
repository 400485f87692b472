// Members of one share group, each a Kafka Java KafkaShareConsumer on its own thread (implicit
// acknowledgement), reading until the test closes stdin; each record is printed as one line
// ("record NAME VALUE"), and "joined NAME" once a member's first poll returned.
// Run with: java -cp <kafka-clients jars> ShareMembers.java BOOTSTRAP TOPIC GROUP MEMBERS
//
// With "explicit" in place of MEMBERS: one member with share.acknowledgement.mode=explicit, driven
// a command line at a time from stdin, each answered on stdout:
//   poll MS                 -> "record PARTITION OFFSET DELIVERY_COUNT VALUE" per record, then "done"
//   ack PARTITION OFFSET T  -> acknowledges a record of the last poll as T (ACCEPT, RELEASE, REJECT), "done"
//   commit                  -> commitSync, "done"
// and "acked ERROR PARTITION:OFFSET,... ..." each time the acknowledgement commit callback runs
// (ERROR "-" when none); stdin's end closes the member.

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareMembers {
    static volatile boolean running = true;

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        if (args[3].equals("explicit")) {
            explicit(bootstrap, topic, group);
            return;
        }
        int members = Integer.parseInt(args[3]);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            String name = "j" + i;
            Thread t = new Thread(() -> run(bootstrap, topic, group, name));
            t.start();
            threads.add(t);
        }
        InputStream in = System.in;
        while (in.read() != -1) {
            // the test closes stdin to stop the members
        }
        running = false;
        for (Thread t : threads) {
            t.join();
        }
    }

    static Properties config(String bootstrap, String group, String name) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", name);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        return props;
    }

    static void explicit(String bootstrap, String topic, String group) throws Exception {
        Properties props = config(bootstrap, group, "j0");
        props.put("share.acknowledgement.mode", "explicit");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
                StringBuilder line = new StringBuilder("acked ");
                line.append(exception == null ? "-" : exception.getClass().getSimpleName());
                for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
                    line.append(' ').append(e.getKey().partition()).append(':');
                    line.append(String.join(",", new TreeSet<>(e.getValue()).stream().map(String::valueOf).toList()));
                }
                say(line.toString());
            });
            consumer.subscribe(List.of(topic));
            Map<String, ConsumerRecord<String, String>> polled = new HashMap<>();
            for (String command; (command = in.readLine()) != null; ) {
                String[] words = command.split(" ");
                switch (words[0]) {
                    case "poll" -> {
                        polled.clear();
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(Long.parseLong(words[1])))) {
                            polled.put(r.partition() + " " + r.offset(), r);
                            say("record " + r.partition() + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1)
                                + " " + r.value());
                        }
                    }
                    case "ack" -> consumer.acknowledge(polled.get(words[1] + " " + words[2]),
                                                       AcknowledgeType.valueOf(words[3]));
                    case "commit" -> consumer.commitSync();
                    default -> throw new IllegalArgumentException(command);
                }
                say("done");
            }
        }
    }

    static void run(String bootstrap, String topic, String group, String name) {
        Properties props = config(bootstrap, group, name);
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            boolean joined = false;
            while (running) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    say("record " + name + " " + r.value());
                }
                if (!joined) {
                    joined = true;
                    say("joined " + name);
                }
            }
        }
    }
}
