// txnperf: a transactional producer that commits every -per-txn records, for benchmarks.txn_perf.
// Native, so that the broker and not the load generator limits the figure. Prints one line:
// "records=N transactions=T seconds=S" (S from the first BeginTransaction to the last commit's
// answer; client start-up and InitProducerId stay outside it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap server")
	topic := flag.String("topic", "", "topic to produce to")
	records := flag.Int("records", 100000, "records in all (rounded down to whole transactions)")
	perTxn := flag.Int("per-txn", 100, "records per transaction")
	size := flag.Int("size", 100, "value bytes")
	txnID := flag.String("transactional-id", "txnperf", "transactional.id")
	debug := flag.Bool("debug", false, "franz-go's debug log to stderr (retries and back-offs)")
	flag.Parse()
	if *topic == "" || *perTxn <= 0 || *records < *perTxn {
		fmt.Fprintln(os.Stderr, "need -topic, -per-txn > 0 and -records >= -per-txn")
		os.Exit(2)
	}
	// The batching of benchmarks.compare's other producers: linger 10 ms, batches up to 1 MB.
	opts := []kgo.Opt{
		kgo.SeedBrokers(*brokers),
		kgo.DefaultProduceTopic(*topic),
		kgo.TransactionalID(*txnID),
		kgo.ProducerLinger(10 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(1000000),
		kgo.MaxBufferedRecords(100000),
	}
	if *debug {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer cl.Close()
	ctx := context.Background()
	// The producer id first (an empty transaction would end before any request), outside the clock.
	if err := cl.BeginTransaction(); err != nil {
		fail("begin", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		fail("warm-up produce", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		fail("warm-up abort", err)
	}
	value := make([]byte, *size)
	for i := range value {
		value[i] = byte(i % 251)
	}
	txns := *records / *perTxn
	var failed atomic.Int64
	var firstErr atomic.Value
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}
	}
	start := time.Now()
	for t := 0; t < txns; t++ {
		if err := cl.BeginTransaction(); err != nil {
			fail("begin", err)
		}
		for i := 0; i < *perTxn; i++ {
			cl.Produce(ctx, &kgo.Record{Value: value}, done)
		}
		// EndTransaction does not flush: every record must be acknowledged before the commit.
		if err := cl.Flush(ctx); err != nil {
			fail("flush", err)
		}
		if failed.Load() > 0 {
			fail("produce", firstErr.Load().(error))
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			fail("commit", err)
		}
	}
	seconds := time.Since(start).Seconds()
	fmt.Printf("records=%d transactions=%d seconds=%.6f\n", txns**perTxn, txns, seconds)
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}
