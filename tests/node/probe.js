// What a KafkaJS user does, with KafkaJS itself and with Confluent's librdkafka-based client
// through its KafkaJS-compatible API, one line per step. Run as
//   node probe.js <bootstrap> <run-id>
// tests/integration/test_node_clients.py compares its output on Rivulet with what it printed on
// Kafka 4.3.1 (probe.kafka-4.3.1.txt). Lines hold no ids, times or broker-chosen orders, so that
// the two brokers print the same when they answer the same.
'use strict';

const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

// A third argument picks the parts (kafkajs, confluent, kafkajs-sasl, comma-separated; "all" for
// every one); a fourth is a SASL_PLAINTEXT listener for the SASL part.
const [bootstrap, run, only = 'all', saslBootstrap] = process.argv.slice(2);
const brokers = [bootstrap];

const say = (client, step, what) => console.log(`[${client}] ${step} ${what}`);
const errText = (e) => {
  // KafkaJS: a protocol error's `type`; an aggregate of them (createTopics) or a retry's cause.
  if (e.errors && e.errors.length) return e.errors.map(errText).join(',');
  if (e.type) return e.type;
  if (e.originalError) return errText(e.originalError);
  if (e.partitions && e.partitions.some((p) => p.error)) return `${e.name}(${e.partitions.map((p) => errText(p.error)).join(',')})`;
  if (e.groups) return e.groups.map((g) => (g.error ? errText(g.error) : 'none')).join(',');
  if (e.cause) return `${e.name}(${errText(e.cause)})`;
  if (e.code !== undefined) return `${e.name}:${e.code}`;
  return e.name;
};
const sorted = (xs) => [...xs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, check, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// The last of what ``get`` answers within a few seconds, as soon as ``ok`` holds for it: Kafka
// writes a transaction's markers after EndTxn's answer, so the offsets it commits show a moment later.
async function settled(get, ok, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await get();
    if (ok(v) || Date.now() > end) return v;
    await sleep(100);
  }
}

// Collects what a consumer's eachMessage sees, per topic-partition, in order.
function collector() {
  const got = [];
  return {
    got,
    eachMessage: async ({ topic, partition, message }) => {
      const headers = Object.entries(message.headers || {})
        .map(([k, v]) => `${k}=${Array.isArray(v) ? v.map(String).join('|') : String(v)}`);
      got.push({ topic, partition, offset: Number(message.offset), key: message.key && message.key.toString(),
        value: message.value && message.value.toString(), headers: headers.join(';') });
    },
  };
}
const values = (got) => got.map((m) => m.value).sort().join(',');

async function kafkajs() {
  const C = 'kafkajs';
  const kafka = new Kafka({ clientId: 'probe', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const t = `kjs-${run}`;
  const t1 = `kjs-one-${run}`;

  // Admin: topics.
  say(C, 'createTopics', await admin.createTopics({ waitForLeaders: true, topics: [
    { topic: t, numPartitions: 3, replicationFactor: 1 },
    { topic: t1, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] }));
  say(C, 'createTopics-again', await admin.createTopics({ topics: [{ topic: t, numPartitions: 3 }] }));
  try {
    await admin.createTopics({ topics: [{ topic: `kjs-bad-${run}`, configEntries: [{ name: 'cleanup.policy', value: 'bogus' }] }] });
    say(C, 'createTopics-bad-config', 'ok');
  } catch (e) { say(C, 'createTopics-bad-config', errText(e)); }
  try {
    await admin.createTopics({ topics: [{ topic: `kjs-badrf-${run}`, replicationFactor: 3 }] });
    say(C, 'createTopics-rf3-one-broker', 'ok');
  } catch (e) { say(C, 'createTopics-rf3-one-broker', errText(e)); }
  for (const [step, topic] of [['createTopics-bad-name', 'bad name!'], ['createTopics-zero-partitions', `kjs-zero-${run}`]]) {
    try {
      await admin.createTopics({ topics: [{ topic, numPartitions: step.endsWith('partitions') ? 0 : 1 }] });
      say(C, step, 'ok');
    } catch (e) { say(C, step, errText(e)); }
  }
  try {
    await admin.describeConfigs({ resources: [{ type: 2, name: `kjs-missing-${run}` }] });
    say(C, 'describeConfigs-unknown-topic', 'ok');
  } catch (e) { say(C, 'describeConfigs-unknown-topic', errText(e)); }
  say(C, 'createTopics-validateOnly', await admin.createTopics({ validateOnly: true, waitForLeaders: false, topics: [{ topic: `kjs-vo-${run}`, numPartitions: 2 }] }));
  say(C, 'createTopics-replicaAssignment', await admin.createTopics({ topics: [{ topic: `kjs-ra-${run}`,
    replicaAssignment: [{ partition: 0, replicas: [1] }, { partition: 1, replicas: [1] }] }] }));
  try {
    await admin.createTopics({ topics: [{ topic: `kjs-ra2-${run}`, replicaAssignment: [{ partition: 0, replicas: [7] }] }] });
    say(C, 'createTopics-replicaAssignment-unknown-broker', 'ok');
  } catch (e) { say(C, 'createTopics-replicaAssignment-unknown-broker', errText(e)); }
  try {
    const acls = await admin.describeAcls({ resourceType: 2, resourcePatternType: 1, operation: 1, permissionType: 1 });
    say(C, 'describeAcls-no-authorizer', `ok ${acls.resources.length}`);
  } catch (e) { say(C, 'describeAcls-no-authorizer', errText(e)); }
  const listed = await admin.listTopics();
  say(C, 'listTopics', [t, t1].map((x) => listed.includes(x)).join(','));
  const md = await admin.fetchTopicMetadata({ topics: [t] });
  say(C, 'fetchTopicMetadata', md.topics.map((x) => `${x.name === t} partitions=${x.partitions.length} leaders=${x.partitions.every((p) => p.leader >= 0)}`).join());
  try {
    await admin.fetchTopicMetadata({ topics: [`kjs-missing-${run}`] });
    say(C, 'fetchTopicMetadata-unknown', 'ok');
  } catch (e) { say(C, 'fetchTopicMetadata-unknown', errText(e)); }

  const cluster = await admin.describeCluster();
  say(C, 'describeCluster', `brokers=${cluster.brokers.length} controller=${cluster.controller >= 0} clusterId=${cluster.clusterId.length > 0}`);
  const reassign = await admin.listPartitionReassignments({ topics: [{ topic: t, partitions: [0, 1, 2] }] });
  say(C, 'listPartitionReassignments', JSON.stringify(reassign.topics));

  // Admin: configs.
  const showConfigs = async (step) => {
    const r = await admin.describeConfigs({ includeSynonyms: false,
      resources: [{ type: 2, name: t1, configNames: ['retention.ms', 'cleanup.policy', 'compression.type', 'max.message.bytes'] }] });
    say(C, step, r.resources.map((res) => `err=${res.errorCode} ` + sorted(res.configEntries.map((c) =>
      `${c.configName}=${c.configValue}/default=${c.isDefault}/source=${c.configSource}/ro=${c.readOnly}`)).join(' ')).join());
  };
  await showConfigs('describeConfigs');
  await admin.alterConfigs({ validateOnly: true, resources: [{ type: 2, name: t1, configEntries: [{ name: 'retention.ms', value: '1000' }] }] });
  await showConfigs('describeConfigs-after-validateOnly');
  // The root logger only: the others are the broker's own (Kafka's log4j ones, Rivulet's Python ones).
  const logger = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: 8, name: '1', configNames: ['root'] }] })
    .then((r) => r.resources.map((res) => `err=${res.errorCode} ${res.configEntries.map((c) =>
      `${c.configName}/source=${c.configSource}/ro=${c.readOnly}`).join()}`).join(), (e) => errText(e));
  say(C, 'describeConfigs-broker-logger', logger);
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: 2, name: t1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }] });
  await showConfigs('describeConfigs-after-alter');
  try {
    await admin.alterConfigs({ resources: [{ type: 2, name: t1, configEntries: [{ name: 'cleanup.policy', value: 'bogus' }] }] });
    say(C, 'alterConfigs-bad', 'ok');
  } catch (e) { say(C, 'alterConfigs-bad', errText(e)); }
  const broker = await admin.describeConfigs({ includeSynonyms: false,
    resources: [{ type: 4, name: '1', configNames: ['num.partitions', 'auto.create.topics.enable'] }] });
  say(C, 'describeConfigs-broker', broker.resources.map((res) => sorted(res.configEntries.map((c) => `${c.configName}=${c.configValue}`)).join(' ')).join());
  const syn = await admin.describeConfigs({ includeSynonyms: true,
    resources: [{ type: 2, name: t1, configNames: ['retention.ms', 'segment.bytes'] }] });
  say(C, 'describeConfigs-synonyms', syn.resources.map((res) => sorted(res.configEntries.map((c) =>
    `${c.configName}:${c.configSynonyms.map((x) => `${x.configName}=${x.configValue}/${x.configSource}`).join('|')}`)).join(' ')).join());
  await admin.createPartitions({ topicPartitions: [{ topic: t1, count: 2 }] });
  say(C, 'createPartitions', (await admin.fetchTopicMetadata({ topics: [t1] })).topics[0].partitions.length);
  try {
    await admin.createPartitions({ topicPartitions: [{ topic: t1, count: 1 }] });
    say(C, 'createPartitions-fewer', 'ok');
  } catch (e) { say(C, 'createPartitions-fewer', errText(e)); }

  // Producer: acks, compression, headers, keys to partitions.
  // Few retries: its unknown topic fails after them.
  const producer = kafka.producer({ allowAutoTopicCreation: false, retry: { retries: 2, initialRetryTime: 100 } });
  await producer.connect();
  for (const acks of [-1, 1]) {
    const r = await producer.send({ topic: t, acks, messages: [{ partition: 0, key: 'k', value: `acks${acks}` }] });
    say(C, `send-acks${acks}`, r.map((x) => `p${x.partition} err=${x.errorCode}`).join());
  }
  say(C, 'send-acks0', (await producer.send({ topic: t, acks: 0, messages: [{ partition: 0, value: 'acks0' }] })).length);
  const gz = await producer.send({ topic: t, compression: CompressionTypes.GZIP,
    messages: [1, 2, 3].map((i) => ({ partition: 1, value: `gzip${i}`, headers: { h: `v${i}`, multi: ['a', 'b'] } })) });
  say(C, 'send-gzip-headers', gz.map((x) => `p${x.partition} base=${x.baseOffset}`).join());
  try {
    await producer.send({ topic: t, compression: CompressionTypes.Snappy, messages: [{ value: 'x' }] });
    say(C, 'send-snappy-no-codec', 'ok');
  } catch (e) { say(C, 'send-snappy-no-codec', e.name); }
  const keyed = await producer.send({ topic: t, messages: ['a', 'b', 'c', 'd'].map((k) => ({ key: k, value: `key-${k}` })) });
  say(C, 'send-keyed', sorted(keyed.map((x) => `p${x.partition}`)).join(','));
  try {
    await producer.send({ topic: `kjs-missing-${run}`, messages: [{ value: 'x' }] });
    say(C, 'send-unknown-topic', 'ok');
  } catch (e) { say(C, 'send-unknown-topic', errText(e)); }
  try {
    await producer.send({ topic: t, messages: [{ partition: 7, value: 'x' }] });
    say(C, 'send-unknown-partition', 'ok');
  } catch (e) { say(C, 'send-unknown-partition', errText(e)); }
  try {
    await producer.send({ topic: t1, messages: [{ value: 'x'.repeat(1100000) }] });
    say(C, 'send-too-large', 'ok');
  } catch (e) { say(C, 'send-too-large', errText(e)); }
  try {
    await producer.send({ topic: t1, messages: [{ value: 'no key' }] });
    say(C, 'send-compacted-no-key', 'ok');
  } catch (e) { say(C, 'send-compacted-no-key', errText(e)); }
  await producer.disconnect();

  // An idempotent producer.
  const idem = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await idem.connect();
  const ir = await idem.sendBatch({ topicMessages: [{ topic: t, messages: [0, 1, 2].map((i) => ({ partition: 2, value: `idem${i}` })) }] });
  say(C, 'idempotent-send', ir.map((x) => `p${x.partition} err=${x.errorCode}`).join());
  await idem.disconnect();

  // Offsets the admin sees.
  const tOffsets = await admin.fetchTopicOffsets(t);
  say(C, 'fetchTopicOffsets', sorted(tOffsets.map((o) => `p${o.partition}:${o.low}-${o.high}`)).join(' '));
  const byTime = await admin.fetchTopicOffsetsByTimestamp(t, Date.now() + 3600000);
  say(C, 'fetchTopicOffsetsByTimestamp-future', sorted(byTime.map((o) => `p${o.partition}:${o.offset}`)).join(' '));
  const byTime0 = await admin.fetchTopicOffsetsByTimestamp(t, 0);
  say(C, 'fetchTopicOffsetsByTimestamp-0', sorted(byTime0.map((o) => `p${o.partition}:${o.offset}`)).join(' '));

  // A consumer group: one member, then a second joins.
  const group = `kjs-g-${run}`;
  const c1 = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 500, rebalanceTimeout: 10000,
    retry: { retries: 3, initialRetryTime: 100 } });
  const assigned = {};
  const track = (name, c) => c.on(c.events.GROUP_JOIN, (e) => {
    assigned[name] = Object.values(e.payload.memberAssignment).reduce((n, ps) => n + ps.length, 0);
  });
  track('c1', c1);
  await c1.connect();
  await c1.subscribe({ topics: [t], fromBeginning: true });
  const col1 = collector();
  await c1.run({ autoCommit: false, eachMessage: col1.eachMessage });
  await until('c1 reads 13 records', () => col1.got.length >= 13);
  say(C, 'consume-one-member', `assigned=${assigned.c1} ${values(col1.got)}`);
  const h = col1.got.find((m) => m.value === 'gzip2');
  say(C, 'consume-headers', h.headers);
  say(C, 'consume-key', col1.got.find((m) => m.value === 'acks1').key);
  const ends = {};
  for (const m of col1.got) ends[m.partition] = Math.max(ends[m.partition] || 0, m.offset + 1);
  await c1.commitOffsets(Object.entries(ends).map(([p, o]) => ({ topic: t, partition: Number(p), offset: String(o) })));
  say(C, 'commitOffsets', sorted(Object.entries(ends).map(([p, o]) => `p${p}:${o}`)).join(' '));
  const resolved = await admin.fetchOffsets({ groupId: `kjs-nogroup-${run}`, topics: [t], resolveOffsets: true });
  say(C, 'fetchOffsets-resolveOffsets', resolved.map((x) => sorted(x.partitions.map((p) => `p${p.partition}:${p.offset}`)).join(' ')).join());
  const fetched = await admin.fetchOffsets({ groupId: group, topics: [t] });
  say(C, 'fetchOffsets', fetched.map((x) => sorted(x.partitions.map((p) => `p${p.partition}:${p.offset}`)).join(' ')).join());

  // Seek, and pause/resume.
  col1.got.length = 0;
  c1.seek({ topic: t, partition: 1, offset: '1' });
  await until('c1 rereads after seek', () => col1.got.length >= 4);
  say(C, 'seek', values(col1.got));
  c1.pause([{ topic: t, partitions: [0] }]);
  say(C, 'paused', JSON.stringify(c1.paused().map((x) => x.partitions)));
  col1.got.length = 0;
  const p2 = kafka.producer();
  await p2.connect();
  await p2.send({ topic: t, messages: [{ partition: 0, value: 'while-paused-0' }, { partition: 1, value: 'while-paused-1' }] });
  await until('c1 reads the unpaused partition', () => col1.got.length >= 1);
  await sleep(1000);
  say(C, 'consume-while-paused', values(col1.got));
  c1.resume([{ topic: t, partitions: [0] }]);
  await until('c1 reads the resumed partition', () => col1.got.length >= 2);
  say(C, 'resumed', values(col1.got));

  // A second member: the group rebalances over the three partitions.
  const c2 = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 500, rebalanceTimeout: 10000 });
  track('c2', c2);
  await c2.connect();
  await c2.subscribe({ topics: [t] });
  await c2.run({ eachMessage: async () => {} });
  await until('both members assigned', () => assigned.c2 !== undefined && assigned.c1 + assigned.c2 === 3 && assigned.c1 > 0);
  say(C, 'rebalance-two-members', sorted([assigned.c1, assigned.c2]).join('+'));
  const desc = await admin.describeGroups([group]);
  say(C, 'describeGroups', desc.groups.map((g) => `${g.state} ${g.protocolType} ${g.protocol} members=${g.members.length} err=${g.errorCode}`).join());
  const groups = await admin.listGroups();
  say(C, 'listGroups', groups.groups.filter((g) => g.groupId === group).map((g) => g.protocolType).join());
  const unknown = await admin.describeGroups([`kjs-nogroup-${run}`]);
  say(C, 'describeGroups-unknown', unknown.groups.map((g) => `${g.state} '${g.protocolType}' members=${g.members.length} err=${g.errorCode}`).join());
  say(C, 'fetchOffsets-unknown-group', (await admin.fetchOffsets({ groupId: `kjs-nogroup-${run}`, topics: [t] }))
    .map((x) => sorted(x.partitions.map((p) => `p${p.partition}:${p.offset}`)).join(' ')).join());
  try {
    await admin.deleteGroups([group]);
    say(C, 'deleteGroups-active', 'ok');
  } catch (e) { say(C, 'deleteGroups-active', errText(e)); }
  try {
    await admin.resetOffsets({ groupId: group, topic: t, earliest: true });
    say(C, 'resetOffsets-active', 'ok');
  } catch (e) { say(C, 'resetOffsets-active', errText(e)); }
  await c2.disconnect();
  await c1.disconnect();
  await admin.resetOffsets({ groupId: group, topic: t, earliest: true });
  say(C, 'resetOffsets-empty', sorted((await admin.fetchOffsets({ groupId: group, topics: [t] }))[0].partitions.map((p) => `p${p.partition}:${p.offset}`)).join(' '));
  await admin.setOffsets({ groupId: group, topic: t, partitions: [{ partition: 0, offset: '2' }] });
  say(C, 'setOffsets', sorted((await admin.fetchOffsets({ groupId: group, topics: [t] }))[0].partitions.map((p) => `p${p.partition}:${p.offset}`)).join(' '));
  const desc2 = await admin.describeGroups([group]);
  say(C, 'describeGroups-empty', desc2.groups.map((g) => `${g.state} members=${g.members.length}`).join());

  // A transactional producer: a committed and an aborted transaction, offsets sent in the first.
  const tp = kafka.producer({ transactionalId: `kjs-tx-${run}`, idempotent: true, maxInFlightRequests: 1 });
  await tp.connect();
  const tx = await tp.transaction();
  await tx.send({ topic: t1, messages: [{ partition: 0, key: 'k', value: 'committed' }] });
  await tx.sendOffsets({ consumerGroupId: `kjs-txg-${run}`, topics: [{ topic: t, partitions: [{ partition: 0, offset: '3' }] }] });
  await tx.commit();
  say(C, 'transaction-commit', 'ok');
  const tx2 = await tp.transaction();
  await tx2.send({ topic: t1, messages: [{ partition: 0, key: 'k', value: 'aborted' }] });
  await tx2.abort();
  say(C, 'transaction-abort', 'ok');
  await tp.disconnect();
  say(C, 'sendOffsets-committed', await settled(async () => (await admin.fetchOffsets({ groupId: `kjs-txg-${run}`, topics: [t] }))[0]
    .partitions.filter((p) => p.partition === 0).map((p) => p.offset).join(), (v) => v === '3'));
  for (const isolation of [true, false]) {
    const rc = kafka.consumer({ groupId: `kjs-rc-${isolation}-${run}`, readUncommitted: !isolation, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 500 });
    await rc.connect();
    await rc.subscribe({ topics: [t1], fromBeginning: true });
    const col = collector();
    await rc.run({ eachMessage: col.eachMessage });
    await until('the transactional records', () => col.got.length >= (isolation ? 1 : 2));
    await sleep(500);
    say(C, isolation ? 'read-committed' : 'read-uncommitted', col.got.filter((m) => m.partition === 0).map((m) => `${m.offset}:${m.value}`).join(','));
    await rc.disconnect();
  }

  // Records and topics deleted.
  try {
    await admin.deleteTopicRecords({ topic: t, partitions: [{ partition: 1, offset: '1000' }] });
    say(C, 'deleteTopicRecords-past-end', 'ok');
  } catch (e) { say(C, 'deleteTopicRecords-past-end', errText(e)); }
  await admin.deleteTopicRecords({ topic: t, partitions: [{ partition: 1, offset: '2' }] });
  say(C, 'deleteTopicRecords', (await admin.fetchTopicOffsets(t)).filter((o) => o.partition === 1).map((o) => `low=${o.low}`).join());
  say(C, 'deleteGroups-empty', (await admin.deleteGroups([group])).map((g) => `${g.groupId === group} err=${g.errorCode}`).join());
  try {
    await admin.deleteGroups([`kjs-nogroup-${run}`]);
    say(C, 'deleteGroups-unknown', 'ok');
  } catch (e) { say(C, 'deleteGroups-unknown', errText(e)); }
  await admin.deleteTopics({ topics: [t, t1] });
  say(C, 'deleteTopics', (await admin.listTopics()).filter((x) => x === t || x === t1).length);
  const quick = kafka.admin({ retry: { retries: 1, initialRetryTime: 100 } });  // it retries an unknown topic
  await quick.connect();
  try {
    await quick.deleteTopics({ topics: [`kjs-missing-${run}`], timeout: 5000 });
    say(C, 'deleteTopics-unknown', 'ok');
  } catch (e) { say(C, 'deleteTopics-unknown', errText(e)); }
  await quick.disconnect();
  await p2.disconnect();
  await admin.disconnect();
}

async function confluent() {
  const C = 'confluent';
  const ck = require('@confluentinc/kafka-javascript').KafkaJS;
  const kafka = new ck.Kafka({ kafkaJS: { brokers, clientId: 'probe-ck', logLevel: ck.logLevel.NOTHING } });
  const count = (assignment) => assignment.reduce((n, x) => n + (x.partitions ? x.partitions.length : 1), 0);
  const admin = kafka.admin();
  await admin.connect();
  const t = `ck-${run}`;
  say(C, 'createTopics', await admin.createTopics({ topics: [{ topic: t, numPartitions: 3, replicationFactor: 1 }] }));
  say(C, 'createTopics-again', await admin.createTopics({ topics: [{ topic: t, numPartitions: 3 }] }));
  try {
    await admin.createTopics({ topics: [{ topic: `ck-bad-${run}`, configEntries: [{ name: 'cleanup.policy', value: 'bogus' }] }] });
    say(C, 'createTopics-bad-config', 'ok');
  } catch (e) { say(C, 'createTopics-bad-config', errText(e)); }
  const md = await admin.fetchTopicMetadata({ topics: [t] });
  say(C, 'fetchTopicMetadata', md.map((x) => `partitions=${x.partitions.length} leaders=${x.partitions.every((p) => p.leader >= 0)}`).join());
  try {
    await admin.fetchTopicMetadata({ topics: [`ck-missing-${run}`] });
    say(C, 'fetchTopicMetadata-unknown', 'ok');
  } catch (e) { say(C, 'fetchTopicMetadata-unknown', errText(e)); }

  // Every codec librdkafka was built with, and an idempotent producer.
  const producer = kafka.producer({ kafkaJS: { idempotent: true, acks: -1 } });
  await producer.connect();
  for (const [i, codec] of ['gzip', 'snappy', 'lz4', 'zstd'].entries()) {
    const p = kafka.producer({ 'compression.codec': codec, 'linger.ms': 5 });
    try {
      await p.connect();
      const r = await p.send({ topic: t, messages: [0, 1].map((j) => ({ partition: i % 3, value: `${codec}${j}`, headers: { codec } })) });
      say(C, `send-${codec}`, r.map((x) => `p${x.partition} err=${x.errorCode}`).join());
    } catch (e) { say(C, `send-${codec}`, errText(e)); }
    await p.disconnect();
  }
  const ir = await producer.send({ topic: t, messages: ['a', 'b', 'c'].map((k) => ({ key: k, value: `idem-${k}` })) });
  say(C, 'idempotent-send', ir.length);
  await producer.disconnect();
  const ts = await admin.fetchTopicOffsetsByTimestamp(t, Date.now() + 3600000);
  say(C, 'fetchTopicOffsetsByTimestamp-future', sorted(ts.map((o) => `p${o.partition}:${o.offset}`)).join(' '));
  const offs = await admin.fetchTopicOffsets(t);
  say(C, 'fetchTopicOffsets', sorted(offs.map((o) => `p${o.partition}:${o.low}-${o.high}`)).join(' '));

  // A consumer group of two members, committing; a transaction sends the first one's offsets.
  const group = `ck-g-${run}`;
  const mk = () => kafka.consumer({ kafkaJS: { groupId: group, fromBeginning: true, autoCommit: false },
    'session.timeout.ms': 10000, 'heartbeat.interval.ms': 500 });
  const c1 = mk();
  await c1.connect();
  await c1.subscribe({ topics: [t] });
  const col1 = collector();
  c1.run({ eachMessage: col1.eachMessage });
  await until('c1 reads 11 records', () => col1.got.length >= 11);
  say(C, 'consume', `${values(col1.got)} headers=${sorted(new Set(col1.got.map((m) => m.headers))).join(',')}`);
  const ends = {};
  for (const m of col1.got) ends[m.partition] = Math.max(ends[m.partition] || 0, m.offset + 1);
  await c1.commitOffsets(Object.entries(ends).map(([p, o]) => ({ topic: t, partition: Number(p), offset: String(o) })));
  const fetched = async () => (await admin.fetchOffsets({ groupId: group, topics: [t] }))
    .map((x) => sorted(x.partitions.map((p) => `p${p.partition}:${p.offset}`)).join(' ')).join();
  // Its commitOffsets hands the commit to librdkafka (commitAsync) and resolves before the broker answers.
  say(C, 'fetchOffsets', await settled(fetched, (v) => v === 'p0:4 p1:4 p2:3'));
  c1.pause([{ topic: t, partitions: [0, 1, 2] }]);
  say(C, 'paused', c1.paused().map((x) => sorted(x.partitions).join(',')).join());
  c1.resume([{ topic: t, partitions: [0, 1, 2] }]);
  col1.got.length = 0;
  c1.seek({ topic: t, partition: 0, offset: '0' });
  await until('c1 rereads partition 0', () => col1.got.filter((m) => m.partition === 0).length >= 4);
  say(C, 'seek', values(col1.got.filter((m) => m.partition === 0)));

  const tp = kafka.producer({ kafkaJS: { transactionalId: `ck-tx-${run}`, idempotent: true } });
  await tp.connect();
  const tx = await tp.transaction();
  await tx.send({ topic: t, messages: [{ partition: 0, value: 'tx-committed' }] });
  try {
    await tx.sendOffsets({ consumer: c1, topics: [{ topic: t, partitions: [{ partition: 1, offset: '1' }] }] });
    say(C, 'sendOffsets', 'ok');
  } catch (e) { say(C, 'sendOffsets', errText(e)); }
  await tx.commit();
  say(C, 'transaction-commit', await settled(fetched, (v) => v.includes('p1:1 ')));
  const tx2 = await tp.transaction();
  await tx2.send({ topic: t, messages: [{ partition: 0, value: 'tx-aborted' }] });
  await tx2.abort();
  say(C, 'transaction-abort', 'ok');
  await tp.disconnect();

  const c2 = mk();
  await c2.connect();
  await c2.subscribe({ topics: [t] });
  c2.run({ eachMessage: async () => {} });
  await until('both members assigned', () => count(c1.assignment()) > 0 && count(c2.assignment()) > 0
    && count(c1.assignment()) + count(c2.assignment()) === 3);
  say(C, 'rebalance-two-members', sorted([count(c1.assignment()), count(c2.assignment())]).join('+'));
  const desc = await admin.describeGroups([group]);
  say(C, 'describeGroups', desc.groups.map((g) => `${g.state} ${g.protocolType} ${g.protocol} members=${g.members.length} simple=${g.isSimpleConsumerGroup}`).join());
  const groups = await admin.listGroups();
  say(C, 'listGroups', groups.groups.filter((g) => g.groupId === group).map((g) => `${g.protocolType} state=${g.state} type=${g.type}`).join());
  try {
    await admin.deleteGroups([group]);
    say(C, 'deleteGroups-active', 'ok');
  } catch (e) { say(C, 'deleteGroups-active', (e.groups || []).map((g) => g.error && errText(g.error)).join() || errText(e)); }
  await c2.disconnect();
  await c1.disconnect();

  // Two members of a KIP-848 group (group.protocol=consumer): the broker assigns.
  const g848 = `ck-848-${run}`;
  const mk848 = () => kafka.consumer({ kafkaJS: { groupId: g848, fromBeginning: true }, 'group.protocol': 'consumer' });
  const m1 = mk848();
  const m2 = mk848();
  for (const m of [m1, m2]) {
    await m.connect();
    await m.subscribe({ topics: [t] });
    m.run({ eachMessage: async () => {} });
  }
  await until('both KIP-848 members assigned', () => count(m1.assignment()) > 0 && count(m2.assignment()) > 0
    && count(m1.assignment()) + count(m2.assignment()) === 3);
  say(C, 'consumer-protocol-two-members', `${sorted([count(m1.assignment()), count(m2.assignment())]).join('+')} ${m1.rebalanceProtocol()}`);
  // Stable once both members have acknowledged their assignments in a heartbeat.
  const d848 = await settled(() => admin.describeGroups([g848]), (d) => d.groups.every((g) => g.state === 3));
  say(C, 'describeGroups-consumer-protocol', d848.groups.map((g) => `${g.state} ${g.type} members=${g.members.length}`).join());
  await m2.disconnect();
  await until('the KIP-848 member left takes all', () => count(m1.assignment()) === 3);
  say(C, 'consumer-protocol-after-leave', count(m1.assignment()));
  await m1.disconnect();

  const rc = kafka.consumer({ kafkaJS: { groupId: `ck-rc-${run}`, fromBeginning: true }, 'isolation.level': 'read_committed' });
  await rc.connect();
  await rc.subscribe({ topics: [t] });
  const col = collector();
  rc.run({ eachMessage: col.eachMessage });
  await until('the committed record', () => col.got.some((m) => m.value === 'tx-committed'));
  await sleep(500);
  say(C, 'read-committed', col.got.filter((m) => m.value.startsWith('tx-')).map((m) => m.value).join(','));
  await rc.disconnect();

  const dr = await admin.deleteTopicRecords({ topic: t, partitions: [{ partition: 2, offset: '1' }] });
  say(C, 'deleteTopicRecords', JSON.stringify(dr.map((x) => [x.partition, x.lowWatermark ?? x.offset, x.error && x.error.type])));
  try {
    await admin.deleteGroups([`ck-nogroup-${run}`]);
    say(C, 'deleteGroups-unknown', 'ok');
  } catch (e) { say(C, 'deleteGroups-unknown', errText(e)); }
  const unknown = await admin.describeGroups([`ck-nogroup-${run}`]);
  say(C, 'describeGroups-unknown', unknown.groups.map((g) => `${g.state} '${g.protocolType}' members=${g.members.length} err=${g.error ? errText(g.error) : 'none'}`).join());
  say(C, 'deleteGroups', JSON.stringify((await admin.deleteGroups([group])).map((g) => [g.groupId === group, g.errorCode])));
  await admin.deleteTopics({ topics: [t] });
  say(C, 'deleteTopics', (await admin.listTopics()).includes(t));
  await admin.disconnect();
}

// SASL on a SASL_PLAINTEXT listener (the fourth argument): PLAIN and SCRAM users alice/alice-secret.
async function kafkajsSasl() {
  const C = 'kafkajs-sasl';
  for (const mechanism of ['plain', 'scram-sha-256', 'scram-sha-512']) {
    for (const password of ['alice-secret', 'wrong']) {
      const kafka = new Kafka({ clientId: 'probe-sasl', brokers: [saslBootstrap], logLevel: logLevel.NOTHING,
        sasl: { mechanism, username: 'alice', password }, retry: { retries: 0 } });
      const admin = kafka.admin();
      try {
        await admin.connect();
        const topic = `sasl-${mechanism}-${run}`;
        await admin.createTopics({ topics: [{ topic }] });
        const producer = kafka.producer();
        await producer.connect();
        await producer.send({ topic, messages: [{ value: mechanism }] });
        await producer.disconnect();
        const offsets = await admin.fetchTopicOffsets(topic);
        say(C, `${mechanism}-${password}`, `ok high=${offsets.map((o) => o.high).join()}`);
      } catch (e) {
        say(C, `${mechanism}-${password}`, `${e.name}: ${e.message}`);
      }
      await admin.disconnect();
    }
  }
}

(async () => {
  for (const [name, fn] of [['kafkajs', kafkajs], ['confluent', confluent], ['kafkajs-sasl', kafkajsSasl]]) {
    if (name === 'kafkajs-sasl' && !saslBootstrap) continue;
    if (only !== 'all' && !only.split(',').includes(name)) continue;
    try {
      await fn();
    } catch (e) {
      say(name, 'FAILED', `${errText(e)} ${e.message}`);
      console.error(e);
      process.exitCode = 1;
    }
  }
  process.exit();
})();
