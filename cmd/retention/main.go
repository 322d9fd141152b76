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
	"bufio"
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
	"unicode/utf8"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/app"
	"github.com/extractq/extractq/internal/since"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// Exit statuses.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotAll   = 3
	minRetention = 24 * time.Hour
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
	ctx, stop := app.Context()
	defer stop()
	os.Exit(run(ctx, os.Args[1:], app.ReadEnv(), os.Stdin, os.Stdout, os.Stderr))
}

// run runs one retention command and returns its exit status.
func run(ctx context.Context, args []string, env app.Env, stdin io.Reader, stdout, stderr io.Writer) int {
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

// openStore opens the database and checks its migrations.
func openStore(ctx context.Context, env app.Env, name string) (*store.Store, error) {
	log, err := app.NewLogger("retention."+name, "warn")
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, env.DatabaseURL, log)
	if err != nil {
		return nil, err
	}
	if err := st.RequireMigrated(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func runErase(ctx context.Context, args []string, env app.Env, stdin io.Reader, stdout, stderr io.Writer) int {
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
		more, err := readKeys(r, *source)
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
	given := len(keys)
	keys = distinct(keys)

	st, err := openStore(ctx, env, "erase")
	if err != nil {
		fmt.Fprintln(stderr, "retention erase:", err)
		return exitFailed
	}
	defer st.Close()
	counts := map[string]int{}
	type missedKey struct {
		store.ErasureResult
		under []string
	}
	var missed []missedKey
	// storedUnder returns the sources under which id is stored, for the
	// first 10 ids not found: a lookup by id alone reads the whole table.
	hints := 0
	storedUnder := func(id string) []string {
		if hints++; hints > 10 {
			return nil
		}
		srcs, _ := st.MessageSources(ctx, st.Pool, id)
		return srcs
	}
	enc := json.NewEncoder(stdout)
	for start := 0; start < len(keys); start += store.MaxErasureKeys {
		chunk := keys[start:min(start+store.MaxErasureKeys, len(keys))]
		res, err := st.MessagesErase(ctx, st.Pool, chunk, store.ErasureParams{Actor: *by, Via: store.ViaCLI, Reason: *reason, DryRun: *dryRun})
		if err != nil {
			fmt.Fprintf(stderr, "retention erase: %v\n(the %d ids before this chunk were erased; running the command again is safe)\n", err, start)
			return exitFailed
		}
		for _, r := range res {
			counts[r.Status]++
			var under []string
			if r.Status == store.ErasureNotFound {
				under = storedUnder(r.ExternalID)
			}
			if *asJSON {
				enc.Encode(struct {
					store.ErasureResult
					StoredUnder []string `json:"stored_under,omitempty"` // sources that hold the id, when not found
				}{r, under})
			} else if r.Status == store.ErasureNotFound || r.Status == store.ErasureQueued {
				missed = append(missed, missedKey{r, under})
			}
		}
	}
	if !*asJSON {
		verb, of := "erased", plural(len(keys), "id", "ids")
		if *dryRun {
			verb = "would erase"
		}
		if given > len(keys) {
			of = fmt.Sprintf("%d distinct ids; %d given", len(keys), given)
		}
		fmt.Fprintf(stdout, "%s %d, already erased %d, not found %d, queued %d (of %s)\n", verb,
			counts[store.ErasureErased]+counts[store.ErasureWouldErase], counts[store.ErasureAlreadyErased], counts[store.ErasureNotFound], counts[store.ErasureQueued], of)
		for _, r := range missed {
			switch r.Status {
			case store.ErasureNotFound:
				elsewhere := ""
				switch {
				case len(r.under) == 1 && r.under[0] == "":
					elsewhere = fmt.Sprintf(" (an id %q is stored without a source: leave out -source)", r.ExternalID)
				case len(r.under) > 0:
					elsewhere = fmt.Sprintf(" (an id %q is stored under source %s: give -source)", r.ExternalID, quoteJoin(r.under))
				}
				fmt.Fprintf(stdout, "  not found: source %q id %q%s\n", r.Source, r.ExternalID, elsewhere)
			case store.ErasureQueued:
				fmt.Fprintf(stdout, "  queued: source %q id %q (message %d, run %d is being extracted; erase it again once it is done)\n",
					r.Source, r.ExternalID, r.MessageID, r.QueuedRun)
			}
		}
	}
	if counts[store.ErasureNotFound]+counts[store.ErasureQueued] > 0 {
		return exitNotAll
	}
	return exitOK
}

// readKeys reads message keys, one per line: a plain id (of source), or a
// JSON object {"source": S, "id": ID} whose id is a string or an integer
// (kept as its decimal text, as ingest keeps it). Blank lines are
// skipped, and a byte order mark at the start. A line that is not UTF-8
// text or holds a NUL (a compressed or UTF-16 file, say) is an error,
// naming the line, as is a bad JSON line.
func readKeys(r io.Reader, source string) ([]store.MessageKey, error) {
	var keys []store.MessageKey
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		if n == 1 {
			raw = strings.TrimPrefix(raw, "\ufeff")
		}
		if !utf8.ValidString(raw) || strings.ContainsRune(raw, 0) {
			return nil, fmt.Errorf("line %d is not UTF-8 text (a compressed or UTF-16 file?): give one id per line, in UTF-8", n)
		}
		line := strings.TrimSpace(raw)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "{"):
			// As strict as ingest: keys case-sensitive and once, nothing
			// after the object.
			v, err := pipeline.DecodeStrict([]byte(line))
			if dk, ok := errors.AsType[*pipeline.DuplicateKeyError](err); ok {
				return nil, fmt.Errorf("line %d: key %s occurs twice; give it once", n, dk.Path)
			}
			if err != nil {
				return nil, fmt.Errorf("line %d: %v (want one {\"source\": S, \"id\": ID} a line)", n, err)
			}
			key, err := ingest.ErasureKey(v, source)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			keys = append(keys, key)
		default:
			keys = append(keys, store.MessageKey{Source: source, ExternalID: line})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

func runPurge(ctx context.Context, args []string, env app.Env, stdout, stderr io.Writer) int {
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
	if cutoff.After(now) {
		fmt.Fprintf(stderr, "retention purge: -older-than %s is in the future (%s); give an age such as 90d or a past date\n",
			*olderThan, cutoff.UTC().Format(time.RFC3339))
		return exitUsage
	}
	if now.Sub(cutoff) < minRetention {
		fmt.Fprintf(stderr, "retention purge: -older-than %s is less than a day ago (%s); messages that young are still being worked on\n",
			*olderThan, cutoff.UTC().Format(time.RFC3339))
		return exitUsage
	}
	if *reason == "" {
		*reason = "received before " + cutoff.UTC().Format(time.RFC3339)
	}

	st, err := openStore(ctx, env, "purge")
	if err != nil {
		fmt.Fprintln(stderr, "retention purge:", err)
		return exitFailed
	}
	defer st.Close()
	p := store.PurgeParams{
		ErasureParams:  store.ErasureParams{Actor: *by, Via: store.ViaCLI, Reason: *reason},
		ReceivedBefore: cutoff, DryRun: *dryRun,
	}
	last := time.Now()
	p.Progress = func(n int) {
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			fmt.Fprintf(stderr, "retention purge: %d messages erased so far\n", n)
		}
	}
	res, err := st.MessagesPurge(ctx, p)
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

// distinct returns keys without repeats, in the order first given.
func distinct(keys []store.MessageKey) []store.MessageKey {
	seen := make(map[store.MessageKey]bool, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// plural returns "1 one" or "n many".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// quoteJoin quotes each of ss and joins them with ", ".
func quoteJoin(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
