// Command chaos runs the whole pipeline on private services and breaks it
// on purpose, then checks that nothing was lost, duplicated or stored
// unvalidated.
//
// Usage:
//
//	chaos [-messages 5000] [-kills 3] [-restart-nats] [-restart-postgres] [-workers 2] [-seed N] [-timeout 15m] [-keep]
//
// It builds the commands, starts its own Postgres (initdb in a temporary
// directory, its own port; as root the cluster runs as the OS user
// postgres), its own NATS (devtools/cmd/natsd, its own port and store), the LLM
// simulator in process (log-normal latency, the demo's fault rates) and
// -workers worker processes, and ingests -messages real customer messages
// (testdata/abcd, repeated under new ids). While they are extracted it
// SIGKILLs a random worker -kills times at random moments and starts it
// again, and restarts NATS and Postgres once each. Then it checks the
// store and prints, as its last line:
//
//	messages=N outcomes=N lost=0 duplicated=0 unvalidated=0 wasted_calls=K
//
// Exit status: 0 when lost, duplicated and unvalidated are 0 and nothing
// else failed (a crash of a worker it did not kill, a failed ingest, a
// timeout); 1 otherwise; 2 bad usage; 130 interrupted. Every process it
// started is stopped and its directory removed (unless -keep), on failure
// and on Ctrl-C too. The machine's shared Postgres and NATS are never used.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.IntVar(&o.Messages, "messages", 5000, "messages to ingest")
	flag.IntVar(&o.Kills, "kills", 3, "times a worker is killed with SIGKILL and started again")
	flag.BoolVar(&o.RestartNATS, "restart-nats", true, "restart NATS once during the run")
	flag.BoolVar(&o.RestartPostgres, "restart-postgres", true, "restart Postgres once during the run")
	flag.IntVar(&o.Workers, "workers", 2, "worker processes")
	flag.IntVar(&o.Concurrency, "concurrency", 16, "messages in flight per worker")
	flag.Int64Var(&o.Seed, "seed", time.Now().UnixNano()%1_000_000, "seed of the faults' moments and targets, and of the simulator")
	flag.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "give up waiting for the outcomes after this long")
	flag.IntVar(&o.IngestRetries, "ingest-retries", 2, "times a failed ingest is run again on the same file (each failure still fails the run)")
	flag.BoolVar(&o.Keep, "keep", false, "keep the work directory (logs, data, configuration)")
	flag.StringVar(&o.Source, "source", "", "JSONL the messages are drawn from (default testdata/abcd/messages.jsonl)")
	flag.StringVar(&o.PGBin, "pg-bin", "", "directory of initdb and postgres (default: the newest Debian version, else PATH)")
	flag.DurationVar(&o.LatencyMedian, "latency-median", 50*time.Millisecond, "simulated LLM latency, median")
	flag.DurationVar(&o.LatencyP99, "latency-p99", 400*time.Millisecond, "simulated LLM latency, 99th percentile")
	flag.DurationVar(&o.AckWait, "ack-wait", 10*time.Second, "JetStream ack wait: how soon a killed worker's messages come back")
	flag.IntVar(&o.MaxDeliver, "max-deliver", 10, "JetStream delivery limit per message")
	flag.DurationVar(&o.Outage, "outage", 0, "how long NATS and Postgres stay down at their restart (default a random 1s to 3s)")
	flag.Parse()
	if flag.NArg() > 0 || o.Messages < 1 || o.Workers < 1 || o.Kills < 0 || o.Concurrency < 1 || o.MaxDeliver < 2 {
		fmt.Fprintln(os.Stderr, "usage: chaos [flags]; -messages, -workers and -concurrency at least 1, -kills at least 0, -max-deliver at least 2")
		flag.PrintDefaults()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, o, os.Stdout)
	stop()
	os.Exit(code)
}
