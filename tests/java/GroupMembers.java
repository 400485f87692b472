// Members of one consumer group, each a Kafka Java consumer on its own thread, driven from
// stdin ("add NAME", "remove NAME"); each rebalance callback and record is printed as one line
// ("assigned NAME [0,1]", "revoked NAME [..]", "lost NAME [..]", "record NAME VALUE") in the
// order they happen, so a test can follow who owns each partition over time.
// Run with: java -cp <kafka-clients jars> GroupMembers.java BOOTSTRAP TOPIC GROUP PROTOCOL

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.StringJoiner;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class GroupMembers {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String ids(Collection<TopicPartition> parts) {
        StringJoiner j = new StringJoiner(",", "[", "]");
        for (TopicPartition tp : parts) j.add(Integer.toString(tp.partition()));
        return j.toString();
    }

    static final class Member implements Runnable {
        final String name;
        final String topic;
        final KafkaConsumer<String, String> consumer;
        volatile boolean running = true;

        Member(String name, String topic, Properties props) {
            this.name = name;
            this.topic = topic;
            this.consumer = new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
        }

        public void run() {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    say("revoked " + name + " " + ids(parts));
                }

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    say("assigned " + name + " " + ids(parts));
                }

                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    say("lost " + name + " " + ids(parts));
                }
            });
            try {
                while (running) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                        say("record " + name + " " + r.value());
                    }
                    consumer.commitAsync();
                }
            } catch (WakeupException e) {
                // remove: fall through to close, which leaves the group
            } finally {
                consumer.close();
                say("closed " + name);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], protocol = args[3];
        Map<String, Member> members = new HashMap<>();
        Map<String, Thread> threads = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split(" ");
            if (cmd.length != 2) continue;
            String name = cmd[1];
            if (cmd[0].equals("add")) {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                p.put("group.protocol", protocol);
                p.put("client.id", name);
                p.put("auto.offset.reset", "earliest");
                p.put("enable.auto.commit", "false");
                p.put("request.timeout.ms", "15000");
                Member m = new Member(name, topic, p);
                Thread t = new Thread(m, name);
                members.put(name, m);
                threads.put(name, t);
                t.start();
            } else if (cmd[0].equals("remove") && members.containsKey(name)) {
                Member m = members.remove(name);
                m.running = false;
                m.consumer.wakeup();
                threads.remove(name).join();
            }
        }
        for (Member m : members.values()) {
            m.running = false;
            m.consumer.wakeup();
        }
        for (Thread t : threads.values()) t.join();
    }
}
