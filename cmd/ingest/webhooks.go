package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/ingestapi/webhook"
)

// serveWebhooks turns ingest.webhooks into the server's webhooks, reading
// each signature's secret from its environment variable (lookup) or file.
// A secret that is unset, empty or unreadable is an error naming the
// webhook and where the secret was looked for, never the secret.
func serveWebhooks(ws []config.Webhook, lookup func(string) (string, bool)) ([]ingestapi.Webhook, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	out := make([]ingestapi.Webhook, 0, len(ws))
	for i, w := range ws {
		at := fmt.Sprintf("ingest.webhooks[%d] (%s)", i, w.Name)
		hw := ingestapi.Webhook{
			Name: w.Name, Schema: w.Schema, MaxBodyBytes: w.MaxBodyBytes,
			Mapping: webhook.Mapping{ID: w.ID, Text: w.Text, Source: w.Source,
				MetadataObject: w.Metadata.Pointer, Metadata: w.Metadata.Keys},
		}
		if sig := w.Signature; sig != nil {
			var secret string
			switch {
			case sig.SecretEnv != "":
				v, ok := lookup(sig.SecretEnv)
				if !ok || strings.TrimSpace(v) == "" {
					return nil, fmt.Errorf("%s: signature.secret_env: %s is not set, or empty: it must hold the webhook's signing secret", at, sig.SecretEnv)
				}
				secret = v
			default:
				b, err := os.ReadFile(sig.SecretFile)
				if err != nil {
					return nil, fmt.Errorf("%s: signature.secret_file: %v", at, err)
				}
				secret = strings.TrimSpace(string(b))
				if secret == "" {
					return nil, fmt.Errorf("%s: signature.secret_file: %s is empty", at, sig.SecretFile)
				}
			}
			hw.Verifier = &webhook.Verifier{Scheme: webhook.Scheme(sig.Scheme), Secret: []byte(secret), Header: sig.Header,
				TimestampHeader: sig.TimestampHeader, Tolerance: sig.Tolerance, Encoding: sig.Encoding, Prefix: sig.Prefix}
			hw.ReplayMemory = sig.ReplayMemory
		}
		out = append(out, hw)
	}
	return out, nil
}

// webhookNames are the names of ws and each one's scheme ("unsigned" for
// none), for the start-up log: never a secret.
func webhookNames(ws []ingestapi.Webhook) []string {
	names := make([]string, len(ws))
	for i, w := range ws {
		scheme := "unsigned"
		if w.Verifier != nil {
			scheme = string(w.Verifier.Scheme)
		}
		names[i] = w.Name + " (" + scheme + ")"
	}
	return names
}
