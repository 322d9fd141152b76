package startup

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRedactedHidesEverySecret logs each form of connection setting a
// secret can take and checks no secret is in the line, and the host is.
func TestRedactedHidesEverySecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     Env
		secrets []string
		keep    []string // parts that must still show
		pgx     bool     // DatabaseURL is a form pgx parses, with a password
	}{
		{"url user:password", Env{DatabaseURL: "postgres://postgres:S3cretPW@127.0.0.1:5432/db?sslmode=disable"},
			[]string{"S3cretPW"}, []string{"postgres:xxxxx@127.0.0.1:5432/db", "sslmode=disable"}, true},
		{"url password parameter", Env{DatabaseURL: "postgres://postgres:S3cretPW@127.0.0.1:5432/db?sslmode=disable&password=Other"},
			[]string{"Other", "S3cretPW"}, []string{"127.0.0.1:5432", "password=xxxxx"}, true},
		{"url only password parameter", Env{DatabaseURL: "postgresql://127.0.0.1/db?password=OnlyParam"},
			[]string{"OnlyParam"}, []string{"127.0.0.1/db"}, true},
		{"url escaped parameter key", Env{DatabaseURL: "postgres://h/db?pass%77ord=EscKey"},
			[]string{"EscKey"}, []string{"h/db"}, true},
		{"url sslpassword passfile", Env{DatabaseURL: "postgres://u@h/db?sslpassword=SslPW&passfile=/secret/PassFile"},
			[]string{"SslPW", "PassFile"}, []string{"u@h/db"}, false},
		{"url multi-host", Env{DatabaseURL: "postgres://u:MultiPW@h1:5432,h2:5433/db"},
			[]string{"MultiPW"}, []string{"h1:5432,h2:5433"}, true},
		{"url unescaped @ in password", Env{DatabaseURL: "postgres://u:At@Sign@h/db"},
			[]string{"At", "Sign"}, []string{"@h/db"}, false},
		{"url missing @", Env{DatabaseURL: "postgres://u:NoAtPW"},
			[]string{"NoAtPW"}, nil, false},
		{"keyword", Env{DatabaseURL: "host=127.0.0.1 user=postgres password=KvPass"},
			[]string{"KvPass"}, []string{"host=127.0.0.1", "user=postgres"}, true},
		{"keyword quoted", Env{DatabaseURL: `host=h password = 'Kv Quoted\'PW' dbname=d`},
			[]string{"Kv", `Quoted\'PW`, "PW"}, []string{"dbname=d"}, true},
		{"keyword sslpassword", Env{DatabaseURL: "host=h sslpassword=KvSsl sslmode=disable"},
			[]string{"KvSsl"}, []string{"sslmode=disable"}, false},
		{"keyword unterminated", Env{DatabaseURL: "host=h password='Unterminated"},
			[]string{"Unterminated"}, nil, false},
		{"not a connection string", Env{DatabaseURL: "JustASecret"}, []string{"JustASecret"}, nil, false},
		{"nats user:password", Env{NATSURL: "nats://u:NatsPW@h:4222"}, []string{"NatsPW"}, []string{"u:xxxxx@h:4222"}, false},
		{"nats cluster list", Env{NATSURL: "nats://u:PwOne@h:4222,nats://u:PwTwo@h:4222"},
			[]string{"PwOne", "PwTwo"}, []string{"nats://u:xxxxx@h:4222,nats://u:xxxxx@h:4222"}, false},
		{"nats token", Env{NATSURL: "nats://tokenNatsPW@127.0.0.1:4222"}, []string{"tokenNatsPW"}, []string{"xxxxx@127.0.0.1:4222"}, false},
		{"nats token without scheme", Env{NATSURL: "h1:4222, bareTok@h2:4222"}, []string{"bareTok"}, []string{"h1:4222"}, false},
		{"nats missing @", Env{NATSURL: "nats://u:NoAtNats"}, []string{"NoAtNats"}, nil, false},
		{"llm url key", Env{LLMBaseURL: "https://k:LlmPW@api.example/v1?api-key=LlmKey"},
			[]string{"LlmPW", "LlmKey"}, []string{"api.example/v1"}, false},
		{"api key", Env{LLMAPIKey: "sk-ApiKey"}, []string{"sk-ApiKey"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pgx {
				cfg, err := pgconn.ParseConfig(tc.env.DatabaseURL)
				if err != nil {
					t.Fatalf("pgx does not parse %q: %v", tc.env.DatabaseURL, err)
				}
				if cfg.Password == "" {
					t.Fatalf("pgx reads no password from %q", tc.env.DatabaseURL)
				}
				// The password as pgx reads it is not logged either.
				tc.secrets = append(tc.secrets, cfg.Password)
			}
			core, logs := observer.New(zapcore.InfoLevel)
			zap.New(core).Info("starting", tc.env.Redacted()...)
			enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
			buf, err := enc.EncodeEntry(logs.All()[0].Entry, logs.All()[0].Context)
			if err != nil {
				t.Fatal(err)
			}
			line := buf.String()
			for _, s := range tc.secrets {
				if strings.Contains(line, s) {
					t.Errorf("secret %q logged: %s", s, line)
				}
			}
			for _, k := range tc.keep {
				if !strings.Contains(line, k) {
					t.Errorf("%q not logged: %s", k, line)
				}
			}
		})
	}
}
