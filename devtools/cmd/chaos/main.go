// Command chaos runs the whole pipeline on private services and breaks it
// on purpose, then checks that nothing was lost, duplicated or stored
// unvalidated.
//
// Usage:
//
//	chaos [-messages 5000] [-kills 3] [-stops 1] [-cuts 4] [-ingest-kills 1] [-provider-outage 45s] [-store-loss] [-seed N] [-timeout 15m] [-keep]
//
// It builds the commands, starts its own Postgres (initdb in a temporary
// directory, its own port; as root the cluster runs as the OS user
// postgres), its own NATS (devtools/cmd/natsd, its own port and store), the LLM
// simulator in process (log-normal latency, the demo's fault rates),
// a TCP proxy (internal/tcpproxy) on every link it may cut, and -workers
// worker processes, and ingests -messages real customer messages
// (testdata/abcd, repeated under new ids). While they are extracted it
// injects the faults drawn from -seed: worker SIGKILLs, a SIGSTOP past the
// ack wait, network cuts (worker↔NATS, worker↔Postgres, ingest↔NATS,
// ingest↔Postgres; open connections reset), ingest killed mid-file and run
// again, a provider outage longer than the breaker cooldown, a restart of
// NATS and of Postgres, and with -store-loss the stream's store deleted.
// Faults fire by the share of messages done, by seconds since ingest
// started, or (ingest's) by the share stored. Then it checks the store and
// prints, as its last line:
//
//	messages=N outcomes=N lost=0 duplicated=0 unvalidated=0 wasted_calls=K
//
// Exit status: 0 when lost, duplicated and unvalidated are 0 and nothing
// else failed (a crash of a worker it did not kill, a failed ingest, a
// triage item of kind delivery, a timeout); 1 otherwise; 2 bad usage; 130
// interrupted. Every process it started is stopped and its directory
// removed (unless -keep), on failure and on Ctrl-C too. The machine's
// shared Postgres and NATS are never used. docs/chaos.md has the details.
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
	flag.DurationVar(&o.Outage, "outage", 0, "how long NATS and Postgres stay down at their restart or store loss (default a random 1s to 3s)")
	flag.IntVar(&o.Stops, "stops", 1, "times a worker is frozen with SIGSTOP for longer than the ack wait, then continued with SIGCONT")
	flag.IntVar(&o.Cuts, "cuts", 4, "network cuts through the harness's proxies, round the links worker↔NATS, worker↔Postgres, ingest↔NATS, ingest↔Postgres (open connections reset)")
	flag.DurationVar(&o.CutFor, "cut-for", 0, "how long a link stays cut (default a random 2s to 8s)")
	flag.IntVar(&o.IngestKills, "ingest-kills", 1, "times ingest is killed with SIGKILL mid-file and run again on the same file")
	flag.DurationVar(&o.ProviderOutage, "provider-outage", 45*time.Second, "how long the simulator refuses every call, once (0: never); longer than the breaker cooldown (30s) to make workers pause and probe")
	flag.BoolVar(&o.StoreLoss, "store-loss", false, "stop NATS, delete its store and start it again empty, once, with runs queued (needs the relay's reconciler to bring them home)")
	flag.DurationVar(&o.Window, "window", 0, "faults timed in seconds fire between 1s and this long after ingest started (default messages/100 seconds, at least 10s)")
	flag.BoolVar(&o.Cluster, "cluster", false, "run NATS as a JetStream cluster of 3 natsd servers (routes on loopback), the stream with nats.replicas 3")
	flag.StringVar(&o.Consumers, "consumers", "shared", "nats.consumers of the run: shared, or per_schema (the workers read one consumer per schema)")
	flag.IntVar(&o.LeaderKills, "leader-kills", 1, "with -cluster: times the stream leader is killed (SIGKILL), then the new leader, both started again")
	flag.Parse()
	if !o.Cluster {
		o.LeaderKills = 0
	}
	if flag.NArg() > 0 || o.Messages < 1 || o.Workers < 1 || o.Kills < 0 || o.Stops < 0 || o.Cuts < 0 || o.IngestKills < 0 ||
		o.Concurrency < 1 || o.MaxDeliver < 2 || o.LeaderKills < 0 || o.Cluster && o.StoreLoss {
		fmt.Fprintln(os.Stderr, "usage: chaos [flags]; -messages, -workers and -concurrency at least 1, -kills, -stops, -cuts, -ingest-kills and -leader-kills at least 0, -max-deliver at least 2; -store-loss needs one server (not -cluster)")
		flag.PrintDefaults()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, o, os.Stdout)
	stop()
	os.Exit(code)
}
