package triage_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
)

// The bundled small sample (testdata/abcd/small.jsonl) extracted by the
// simulator and scored by eval: the reports page, in chromium, shows the
// figures eval computed, field by field, labelled as simulator figures.
func TestBrowserEvalFigures(t *testing.T) {
	chromiumPath(t)
	t.Parallel()
	ctx := context.Background()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")

	sim := httptest.NewServer(llmsim.New(config.Default().Simulator, log))
	defer sim.Close()
	oc := openai.DefaultConfig("test")
	oc.BaseURL = sim.URL + "/v1"
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{Model: llmsim.DefaultModel, MaxCompletionTokens: 1024, Logger: log})
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../testdata/abcd/small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	labels, err := eval.ReadLabels(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var preds []eval.Prediction
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct{ ID, Source, Text string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		res, err := ext.Process(ctx, pipeline.Input{Text: l.Text, Schema: schema, Prompt: prompt, Repair: pipeline.RepairRegenerate})
		if err != nil {
			t.Fatal(err)
		}
		preds = append(preds, eval.Prediction{ExternalID: l.ID, Source: l.Source, Record: res.Data, Text: l.Text})
	}
	specFile, err := os.Open("../testdata/abcd/eval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := eval.ReadSpec(specFile)
	specFile.Close()
	if err != nil {
		t.Fatal(err)
	}
	fields, err := eval.Fields(schema, spec)
	if err != nil {
		t.Fatal(err)
	}
	scored, err := eval.Score(schema, fields, labels, preds, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	batch := eval.Batch{ID: b.batch, SchemaID: "customer_message", SchemaVersions: []string{"1"}, PromptVersions: []string{"extract.v1"}, Models: []string{llmsim.DefaultModel}}
	batch.SetSimulated()
	report := eval.NewReport(batch, scored, eval.Options{})
	if _, err := eval.Save(ctx, b.st, b.st.Pool, report, eval.SaveParams{LabelsName: "small.jsonl", LabelsSHA256: "-"}); err != nil {
		t.Fatal(err)
	}
	pct := func(m eval.Metric) string {
		if !m.Defined {
			return "–"
		}
		return fmt.Sprintf("%.1f [%.1f–%.1f]", 100*m.Value, 100*m.Low, 100*m.High)
	}

	web := httptest.NewServer(b.srv.Handler())
	defer web.Close()
	tab, cancelTab := chromedp.NewContext(sharedBrowser(t, browserWatchdog), chromedp.WithNewBrowserContext())
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	sctx, cancel := context.WithTimeout(tab, browserStep)
	defer cancel()
	if err := chromedp.Do(sctx,
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.SendKeys(chromedp.ID("login"), "alice"),
		chromedp.SendKeys(chromedp.ID("password"), "correct horse battery"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("items")),
		chromedp.Navigate(web.URL+"/reports#eval"),
		chromedp.WaitVisible(chromedp.ID("eval-table")),
	); err != nil {
		t.Fatal(err)
	}
	rawRows, err := chromedp.Run(sctx, chromedp.Evaluate[[]byte](
		`JSON.stringify([...document.querySelectorAll('#eval-table tbody tr')].map(tr => [...tr.cells].map(c => c.textContent.trim())))`))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(rawRows, &s); err != nil {
		t.Fatalf("%s: %v", rawRows, err)
	}
	var rows [][]string
	if err := json.Unmarshal([]byte(s), &rows); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	if len(rows) != len(report.Fields) {
		t.Fatalf("the page shows %d fields, eval scored %d: %q", len(rows), len(report.Fields), rows)
	}
	for i, f := range report.Fields {
		want := []string{f.Field, map[bool]string{true: "g"}[f.Grounded], fmt.Sprint(f.N), fmt.Sprint(f.TP), fmt.Sprint(f.FP), fmt.Sprint(f.FN), fmt.Sprint(f.TN),
			pct(f.Precision), pct(f.Recall), pct(f.F1), "", pct(f.Exact)}
		if strings.Join(rows[i], "|") != strings.Join(want, "|") {
			t.Errorf("row %d: page %q, eval %q", i, rows[i], want)
		}
	}
	simRaw, err := chromedp.Run(sctx, chromedp.Evaluate[[]byte](`document.getElementById('eval-simulated') ? document.getElementById('eval-simulated').textContent : ''`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(simRaw), "Simulator figures") {
		t.Errorf("the page does not label the simulator's figures: %s", simRaw)
	}
	if dir := os.Getenv("TRIAGE_SCREENSHOTS"); dir != "" {
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(90))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "reports-eval.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("eval of small.jsonl on the simulator, as the page shows it: %d fields", len(rows))
}
