// Command retention erases customer text: a customer's messages on their
// request (erase), or every message older than the retention period
// (purge). Counts, costs, statuses and the failure analytics are kept;
// the text, its copies in model replies, results and triage items, and
// the reasons and records in the audit log are removed.
// docs/retention.md has the whole list.
//
// Usage:
//
//	retention erase -by NAME [-reason TEXT] [-source S] [-ids-file FILE] [-dry-run] [-json] [--] [ID ...]
//	retention purge -older-than AGE [-by NAME] [-reason TEXT] [-dry-run] [-json]
//
// It reads DATABASE_URL. Exit status: 0 done, 1 failed, 2 bad usage, 3
// some ids were not erased (not found, or a run of theirs is queued:
// try again once it is done).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/extractq/extractq/cmd/internal/cmdconfig"
	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/internal/since"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/internal/words"
	"github.com/extractq/extractq/store"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
	exitNotAll = 3
)

const usage = `usage:
  retention erase -by NAME [-reason TEXT] [-source S] [-ids-file FILE] [-dry-run] [-json] [--] [ID ...]
      erase the messages with these ids (a customer's request)
  retention purge -older-than AGE [-by NAME] [-reason TEXT] [-dry-run] [-json]
      erase every message received before AGE ago (the retention period)

Both keep counts, costs, statuses and failure analytics; they remove the
text and every copy of it (model replies, results, triage items, audit
reasons). "retention erase -h" and "retention purge -h" list the flags.
`

func main() {
	ctx, stop := startup.Context()
	defer stop()
	os.Exit(run(ctx, os.Args[1:], startup.ReadEnv(), os.Stdin, os.Stdout, os.Stderr))
}

// run runs one retention command and returns its exit status.
func run(ctx context.Context, args []string, env startup.Env, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "erase":
		return runErase(ctx, args[1:], env, stdin, stdout, stderr)
	case "purge":
		return runPurge(ctx, args[1:], env, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "retention: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// flagSet returns a flag set named "retention NAME" writing to stderr.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("retention "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// openStore opens the database and checks its migrations
// (cmdconfig.OpenStore); the error is the step's own.
func openStore(ctx context.Context, env startup.Env, name string) (*store.Store, error) {
	log, err := startup.NewLogger("retention."+name, "warn")
	if err != nil {
		return nil, err
	}
	st, err := cmdconfig.OpenStore(ctx, env, log, cmdconfig.StoreOptions{})
	if err != nil {
		_, err := cmdconfig.Step(err)
		return nil, err
	}
	return st, nil
}

func runErase(ctx context.Context, args []string, env startup.Env, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flagSet("erase", stderr)
	by := fs.String("by", "", "who asks for the erasure (a name, for the audit log); required")
	reason := fs.String("reason", "", "the request's reference, for the audit log (no customer text)")
	source := fs.String("source", "", `the source of the ids given as arguments, plain lines, or JSON lines without "source"`)
	idsFile := fs.String("ids-file", "", `ids to erase, one per line ("-": standard input); a line may also be a JSON object {"source": S, "id": ID}`)
	asJSON := fs.Bool("json", false, "print one JSON line per id instead of the summary")
	dryRun := fs.Bool("dry-run", false, "say what would be erased; erase nothing")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	// The flag package stops at the first id: a flag after the ids would
	// be taken for an id and its message erased. An id that starts with
	// "-" goes after "--".
	afterDashes := false
	if first := len(args) - fs.NArg(); first > 0 && args[first-1] == "--" {
		afterDashes = true
	}
	for _, a := range fs.Args() {
		switch {
		case !strings.HasPrefix(a, "-"):
		case !afterDashes:
			fmt.Fprintf(stderr, "retention erase: %q comes after the ids: flags go before them "+
				"(an id that starts with \"-\" goes after --: retention erase -by NAME -- %s); nothing was erased\n", a, a)
			return exitUsage
		case isFlag(fs, a):
			// Even after --, an id spelt as one of the flags is more
			// likely a flag put in the wrong place: an erasure cannot be
			// undone.
			fmt.Fprintf(stderr, "retention erase: the id %q is spelt as a flag; if it really is an id, give it in -ids-file; nothing was erased\n", a)
			return exitUsage
		}
	}
	if strings.TrimSpace(*by) == "" {
		fmt.Fprintln(stderr, "retention erase: -by is required: who asks for the erasure, for the audit log")
		return exitUsage
	}
	keys := make([]store.MessageKey, 0, fs.NArg())
	for _, id := range fs.Args() {
		keys = append(keys, store.MessageKey{Source: *source, ExternalID: id})
	}
	// An id or source that is not UTF-8 names no stored message, and must
	// not be read as one that holds U+FFFD: refused before connecting.
	if ik, ok := errors.AsType[*erasure.InvalidKeyError](erasure.CheckKeys(keys)); ok {
		fmt.Fprintf(stderr, "retention erase: %v\n", ik)
		return exitUsage
	}
	if *idsFile != "" {
		r, name := stdin, "standard input"
		if *idsFile != "-" {
			f, err := os.Open(*idsFile)
			if err != nil {
				fmt.Fprintln(stderr, "retention erase:", err)
				return exitUsage
			}
			defer f.Close()
			r, name = f, *idsFile
		}
		more, err := erasure.ReadKeys(r, *source)
		if err != nil {
			fmt.Fprintf(stderr, "retention erase: %s: %v\n", name, err)
			return exitUsage
		}
		keys = append(keys, more...)
	}
	if len(keys) == 0 {
		fmt.Fprintln(stderr, "retention erase: no ids: give them as arguments or with -ids-file")
		return exitUsage
	}

	st, err := openStore(ctx, env, "erase")
	if err != nil {
		fmt.Fprintln(stderr, "retention erase:", err)
		return exitFailed
	}
	defer st.Close()
	// The first 10 ids not found are looked up by id alone (which reads
	// the whole table), to name the source they are stored under.
	res, err := erasure.New(st).Erase(ctx, erasure.Request{Keys: keys, Actor: *by, Via: store.ViaCLI, Reason: *reason, DryRun: *dryRun, Hints: 10})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range res.Results {
			enc.Encode(r)
		}
	}
	if se, ok := errors.AsType[*erasure.StoppedError](err); ok {
		fmt.Fprintf(stderr, "retention erase: %v\n(the %d ids before this chunk were erased; running the command again is safe)\n", se.Err, se.Done)
		return exitFailed
	}
	if err != nil {
		fmt.Fprintln(stderr, "retention erase:", err)
		return exitFailed
	}
	if !*asJSON {
		distinct := len(res.Results)
		verb, of := "erased", words.Plural(distinct, "id", "ids")
		if *dryRun {
			verb = "would erase"
		}
		if res.Given > distinct {
			of = fmt.Sprintf("%d distinct ids; %d given", distinct, res.Given)
		}
		fmt.Fprintf(stdout, "%s %d, already erased %d, not found %d, queued %d (of %s)\n", verb,
			res.Erased+res.WouldErase, res.AlreadyErased, res.NotFound, res.Queued, of)
		for _, r := range res.Results {
			switch r.Status {
			case store.ErasureNotFound:
				elsewhere := ""
				switch {
				case len(r.StoredUnder) == 1 && r.StoredUnder[0] == "":
					elsewhere = fmt.Sprintf(" (an id %q is stored without a source: leave out -source)", r.ExternalID)
				case len(r.StoredUnder) > 0:
					elsewhere = fmt.Sprintf(" (an id %q is stored under source %s: give -source)", r.ExternalID, quoteJoin(r.StoredUnder))
				}
				fmt.Fprintf(stdout, "  not found: source %q id %q%s\n", r.Source, r.ExternalID, elsewhere)
			case store.ErasureQueued:
				fmt.Fprintf(stdout, "  queued: source %q id %q (message %d, run %d is being extracted; erase it again once it is done)\n",
					r.Source, r.ExternalID, r.MessageID, r.QueuedRun)
			}
		}
	}
	if res.Missed() > 0 {
		return exitNotAll
	}
	return exitOK
}

func runPurge(ctx context.Context, args []string, env startup.Env, stdout, stderr io.Writer) int {
	fs := flagSet("purge", stderr)
	olderThan := fs.String("older-than", "", "erase messages received before this: an age (90d, 26w) or a date (2026-09-01); required, at least 1 day ago")
	by := fs.String("by", "retention", "who purges (a name, for the audit log)")
	reason := fs.String("reason", "", "the policy's reference, for the audit log (default: the cutoff)")
	dryRun := fs.Bool("dry-run", false, "count what would be erased and kept; erase nothing")
	asJSON := fs.Bool("json", false, "print the counts as one JSON object")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "retention purge: unexpected argument %q (the messages are chosen by -older-than)\n", fs.Arg(0))
		return exitUsage
	case strings.TrimSpace(*olderThan) == "":
		fmt.Fprintln(stderr, "retention purge: -older-than is required, such as -older-than 90d")
		return exitUsage
	case strings.TrimSpace(*by) == "":
		fmt.Fprintln(stderr, "retention purge: -by must name who purges")
		return exitUsage
	}
	now := time.Now()
	cutoff, err := since.Parse(*olderThan, now)
	if err != nil {
		fmt.Fprintln(stderr, "retention purge: -older-than:", strings.TrimPrefix(err.Error(), "since "))
		return exitUsage
	}
	if ce, ok := errors.AsType[*erasure.CutoffError](erasure.CheckCutoff(cutoff, now)); ok {
		if ce.Future {
			fmt.Fprintf(stderr, "retention purge: -older-than %s is in the future (%s); give an age such as 90d or a past date\n",
				*olderThan, cutoff.UTC().Format(time.RFC3339))
		} else {
			fmt.Fprintf(stderr, "retention purge: -older-than %s is less than a day ago (%s); messages that young are still being worked on\n",
				*olderThan, cutoff.UTC().Format(time.RFC3339))
		}
		return exitUsage
	}

	st, err := openStore(ctx, env, "purge")
	if err != nil {
		fmt.Fprintln(stderr, "retention purge:", err)
		return exitFailed
	}
	defer st.Close()
	last := time.Now()
	res, err := erasure.New(st).Purge(ctx, erasure.PurgeRequest{
		ReceivedBefore: cutoff, Actor: *by, Via: store.ViaCLI, Reason: *reason, DryRun: *dryRun,
		Progress: func(n int) {
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				fmt.Fprintf(stderr, "retention purge: %d messages erased so far\n", n)
			}
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "retention purge: %v\n(%d messages were erased before the failure; running the command again is safe)\n", err, res.Erased)
		return exitFailed
	}
	if *asJSON {
		out := struct {
			store.PurgeResult
			ReceivedBefore time.Time `json:"received_before"`
			DryRun         bool      `json:"dry_run"`
		}{res, cutoff.UTC(), *dryRun}
		json.NewEncoder(stdout).Encode(out)
		return exitOK
	}
	verb := "erased"
	if *dryRun {
		verb = "would erase"
	}
	fmt.Fprintf(stdout, "%s %d messages received before %s; kept %d with a queued run, %d with an open triage item, %d busy (a later purge erases them)\n",
		verb, res.Erased, cutoff.UTC().Format(time.RFC3339), res.KeptQueued, res.KeptOpenItem, res.KeptBusy)
	return exitOK
}

// isFlag reports whether a, such as "-dry-run" or "--json=true", names a
// flag of fs (or -h, -help).
func isFlag(fs *flag.FlagSet, a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return fs.Lookup(name) != nil || name == "h" || name == "help"
}

// quoteJoin quotes each of ss and joins them with ", ".
func quoteJoin(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
