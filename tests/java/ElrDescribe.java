// Kafka's Java Admin describeTopics on a cluster in a KIP-966 state: prints what
// TopicPartitionInfo says of each partition's leader, ISR, eligible leader replicas (elr()) and
// last known ELR (lastKnownElr()), one line per partition, for the test to compare.
// Run with: java -cp <kafka-clients jars> ElrDescribe.java BOOTSTRAP TOPIC...
//
// The Admin asks DescribeCluster for the live brokers, then DescribeTopicPartitions for the
// topics; an id it cannot find among the live brokers becomes a placeholder Node (empty host,
// port -1), printed here as "<id>:offline", a live one as "<id>:live". A null list (the
// four-argument TopicPartitionInfo, as from the Metadata API) prints as "null".

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;

public class ElrDescribe {
    static String node(Node n) {
        return n.id() + (n.host().isEmpty() && n.port() == -1 ? ":offline" : ":live");
    }

    static String nodes(List<Node> ns) {
        return ns == null ? "null" : ns.stream().map(ElrDescribe::node).sorted().collect(Collectors.toList()).toString();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        List<String> topics = Arrays.asList(args).subList(1, args.length);
        try (Admin admin = Admin.create(props)) {
            Map<String, TopicDescription> described = admin.describeTopics(topics).allTopicNames().get();
            for (String t : topics) {
                for (TopicPartitionInfo p : described.get(t).partitions()) {
                    System.out.println(t + "-" + p.partition() + " leader=" + (p.leader() == null ? "none" : node(p.leader()))
                        + " isr=" + nodes(p.isr()) + " elr=" + nodes(p.elr()) + " lastKnownElr=" + nodes(p.lastKnownElr()));
                }
            }
        }
    }
}
