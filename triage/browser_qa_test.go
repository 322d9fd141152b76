package triage_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/extractq/extractq/store"
)

// A reviewer works the QA queue in chromium with keys only: c claims the
// first sample; on each, n marks the selected field wrong and takes its
// fix, y marks it right, j moves on, a marks every unmarked field right
// and s saves and opens the next sample. The verdicts are stored per
// field, and the reports page then shows each field's estimated
// false-accept rate with its interval, weighted for the strata (the two
// samples drawn at 50% weigh 2 each, the two at 5% 20 each), labelled as
// simulator figures.
func TestBrowserQA(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{plain: true})
	b.reviewer(t, "alice", "correct horse battery")
	g := newBrowserRig(t, b, browserWatchdog)
	ids := []int64{
		b.qaSample(t, "I forgot my password, I am Dana Cruz", "recover_password"), // 50%: weight 2
		b.qaSample(t, "Dana Cruz here, please reset my password", "recover_password"),
		b.qaSample(t, "Dana Cruz: my parcel never arrived", "recover_password"), // wrong intent; 50%
		b.qaSample(t, "This is Dana Cruz, I cannot log in", "reset_2fa"),        // 5%: weight 20
	}
	tab := g.tab(t)
	g.login(t, tab, "alice", "correct horse battery")
	g.step(t, tab, "open the QA queue", chromedp.Navigate(g.web.URL+"/qa"), chromedp.WaitVisible(chromedp.ID("qa-samples")))
	var open int
	g.eval(t, tab, `document.querySelectorAll('#qa-samples tbody a').length`, &open)
	if open != len(ids) {
		t.Fatalf("the QA queue lists %d samples, want %d", open, len(ids))
	}
	onSample := func(n int) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.ID(fmt.Sprintf("qa-sample-%d", n)))
	}
	sampleID := func(messageID int64) int {
		var id int
		if err := b.st.Pool.QueryRow(context.Background(), `SELECT id FROM qa_samples WHERE message_id = $1`, messageID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	s := make([]int, len(ids))
	for i, id := range ids {
		s[i] = sampleID(id)
	}
	g.step(t, tab, "claim the first sample (c)", realKeys("c"), onSample(s[0]))
	// Sample 1: every field right.
	g.step(t, tab, "sample 1: a, s", realKeys("a"), realKeys("s"), onSample(s[1]))
	// Sample 2: intent right (y), flow wrong with a fix (n, type, Enter),
	// the rest right.
	g.step(t, tab, "sample 2: y, n, fix, a, s", realKeys("y"), realKeys("n"), poll(`document.activeElement.classList.contains('qa-fix')`),
		realKeys("manage_account\r"), realKeys("a"), realKeys("s"), onSample(s[2]))
	// Sample 3: intent wrong, fixed; the rest right.
	g.step(t, tab, "sample 3: n, fix, a, s", realKeys("n"), poll(`document.activeElement.classList.contains('qa-fix')`),
		realKeys("missing\r"), realKeys("a"), realKeys("s"), onSample(s[3]))
	// Sample 4: full_name (the third field) wrong: j j n, empty fix
	// (null), then the rest right.
	g.step(t, tab, "sample 4: j, j, n, Enter, a, s", realKeys("jjn"), poll(`document.activeElement.classList.contains('qa-fix')`),
		realKeys("\r"), realKeys("a"), realKeys("s"),
		chromedp.WaitVisible(chromedp.ID("qa-counts")),
		poll(`document.getElementById('flash') && document.getElementById('flash').textContent.includes('No open QA sample')`))

	ctx := context.Background()
	wrong := map[string]string{}
	rows, err := b.st.Pool.Query(ctx, `SELECT s.message_id, v.path, coalesce(v.fixed::text, '') FROM qa_verdicts v JOIN qa_samples s ON s.id = v.sample_id WHERE NOT v.correct ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var mid int64
		var path, fixed string
		if err := rows.Scan(&mid, &path, &fixed); err != nil {
			t.Fatal(err)
		}
		wrong[fmt.Sprintf("%d%s", mid, path)] = fixed
	}
	rows.Close()
	want := map[string]string{
		fmt.Sprintf("%d/flow", ids[1]):      `"manage_account"`,
		fmt.Sprintf("%d/intent", ids[2]):    `"missing"`,
		fmt.Sprintf("%d/full_name", ids[3]): `null`,
	}
	if fmt.Sprint(wrong) != fmt.Sprint(want) {
		t.Fatalf("wrong verdicts %v, want %v", wrong, want)
	}
	var verdicts, reviewed int
	if err := b.st.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM qa_verdicts), (SELECT count(*) FROM qa_samples WHERE status = 'reviewed')`).Scan(&verdicts, &reviewed); err != nil {
		t.Fatal(err)
	}
	if reviewed != 4 || verdicts != 4*17 {
		t.Fatalf("%d samples reviewed with %d verdicts, want 4 with 68 (17 fields each)", reviewed, verdicts)
	}

	g.step(t, tab, "open the reports' QA section", chromedp.Navigate(g.web.URL+"/reports#qa"), chromedp.WaitVisible(chromedp.ID("qa-table")))
	var shown [][]string
	g.eval(t, tab, `[...document.querySelectorAll('#qa-table tbody tr')].map(tr => [...tr.cells].map(c => c.textContent.trim()))`, &shown)
	est, err := b.st.QAFieldEstimates(ctx, b.st.Pool, "customer_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(shown) != len(est) || len(est) != 18 {
		t.Fatalf("the page shows %d rows, the view has %d, want 18 (17 fields and the record)", len(shown), len(est))
	}
	byField := map[string][]string{}
	for _, r := range shown {
		byField[r[4]] = r
	}
	// Hand-computed: sum w = 2+2+2+20 = 26; /intent wrong in a 50%
	// sample: 2/26 = 7.7%; /full_name wrong in the 5% sample: 20/26 =
	// 76.9%; the record wrong in three samples: 24/26 = 92.3%. Effective
	// n = 26^2 / (3*4 + 400) = 1.6.
	for field, rate := range map[string]string{"/intent": "7.7 [", "/full_name": "76.9 [", "/flow": "7.7 [", "(record)": "92.3 [", "/email": "0.0 ["} {
		r := byField[field]
		if len(r) < 10 || !strings.HasPrefix(r[7], rate) || r[9] != "1.6" {
			t.Errorf("field %s: page row %q, want a rate of %s…] on an effective n of 1.6", field, r, rate)
		}
	}
	for i, e := range est {
		if want := fmt.Sprintf("%.1f [%.1f–%.1f]", 100*e.FalseAcceptRate, 100*e.Low, 100*e.High); shown[i][4] != e.Field || shown[i][7] != want {
			t.Errorf("row %d: page %q, view %s %s", i, shown[i], e.Field, want)
		}
	}
	var sim string
	g.eval(t, tab, `(document.getElementById('qa-simulated') || {}).textContent || ''`, &sim)
	if !strings.Contains(sim, "Simulator figures") {
		t.Errorf("the QA section does not label the simulator's figures: %q", sim)
	}
	if dir := os.Getenv("TRIAGE_SCREENSHOTS"); dir != "" {
		sctx, cancel := context.WithTimeout(tab, browserStep)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(90))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "reports-qa.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = store.QAFieldRecord
}
