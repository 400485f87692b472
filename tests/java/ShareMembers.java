// Members of one share group, each a Kafka Java KafkaShareConsumer on its own thread (implicit
// acknowledgement), reading until the test closes stdin; each record is printed as one line
// ("record NAME VALUE"), and "joined NAME" once a member's first poll returned.
// Run with: java -cp <kafka-clients jars> ShareMembers.java BOOTSTRAP TOPIC GROUP MEMBERS

import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareMembers {
    static volatile boolean running = true;

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
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

    static void run(String bootstrap, String topic, String group, String name) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", name);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
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
