package queue

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/extractq/extractq/config"
)

// SecurityOptions returns the nats.Options that present n's credentials
// and TLS material (nats.credentials_file, nats.nkey_seed_file, nats.tls):
// a user JWT and its seed, an NKey seed, a CA pool and a client
// certificate. Pass them to Connect. Nothing configured gives no options
// (user and password or a token in the URL, and tls:// with the system's
// roots, still work).
//
// Each file is read and checked first, so a bad one is an error naming
// the file and its problem before any connection is tried: missing or
// unreadable, no user JWT or seed in a credentials file, a seed that is
// malformed, not a user's or not the JWT's user, a CA file without a PEM
// certificate, a client certificate that is not PEM, expired, or whose key
// does not match it. The files are read again at each (re)connection by
// nats.go, so files rotated in place take effect at the next one.
func SecurityOptions(n config.NATS) ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case n.CredentialsFile != "" && n.NKeySeedFile != "":
		return nil, errors.New("nats: credentials_file and nkey_seed_file are both set: a user is a JWT (credentials file) or an NKey, not both")
	case n.CredentialsFile != "":
		if err := checkCredentials(n.CredentialsFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(n.CredentialsFile))
	case n.NKeySeedFile != "":
		if err := checkUserSeed(n.NKeySeedFile); err != nil {
			return nil, err
		}
		o, err := nats.NkeyOptionFromSeed(n.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey_seed_file %s: %w", n.NKeySeedFile, err)
		}
		opts = append(opts, o)
	}
	t := n.TLS
	if t.CAFile != "" {
		if err := checkCAFile(t.CAFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(t.CAFile))
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("nats.tls: cert_file and key_file go together: set both or neither")
	}
	if t.CertFile != "" {
		if err := checkClientCert(t.CertFile, t.KeyFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
	}
	return opts, nil
}

// readFile reads path for the configuration key key, naming both and the
// problem in its error.
func readFile(key, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%s %s: no such file", key, path)
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("%s %s: not readable by this process (permission denied)", key, path)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", key, path, err)
	case len(strings.TrimSpace(string(b))) == 0:
		return nil, fmt.Errorf("%s %s: the file is empty", key, path)
	}
	return b, nil
}

// checkCredentials checks a .creds file: a user JWT and a user seed, the
// seed being the JWT's user's.
func checkCredentials(path string) error {
	const key = "nats.credentials_file"
	b, err := readFile(key, path)
	if err != nil {
		return err
	}
	defer wipe(b)
	if !strings.Contains(string(b), "-BEGIN NATS USER JWT-") {
		return fmt.Errorf("%s %s: no user JWT (a -----BEGIN NATS USER JWT----- block, as nsc writes a .creds file)", key, path)
	}
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("%s %s: user JWT: %w", key, path, err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("%s %s: the user JWT does not decode: %w", key, path, err)
	}
	if claims.Expires != 0 && time.Unix(claims.Expires, 0).Before(time.Now()) {
		return fmt.Errorf("%s %s: the user JWT expired at %s", key, path, time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	}
	if !strings.Contains(string(b), "-BEGIN USER NKEY SEED-") {
		return fmt.Errorf("%s %s: no user NKey seed (a -----BEGIN USER NKEY SEED----- block)", key, path)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s %s: the NKey seed is malformed: %w", key, path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("%s %s: the NKey seed is malformed: %w", key, path, err)
	}
	if pub != claims.Subject {
		return fmt.Errorf("%s %s: the NKey seed is not the user JWT's: the seed's public key is %s, the JWT is for %s", key, path, pub, claims.Subject)
	}
	return nil
}

// checkUserSeed checks an NKey seed file: one user seed ("SU...").
func checkUserSeed(path string) error {
	const key = "nats.nkey_seed_file"
	b, err := readFile(key, path)
	if err != nil {
		return err
	}
	defer wipe(b)
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("%s %s: the NKey seed is malformed: %w", key, path, err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("%s %s: no seed, only a public key (the file must hold the private seed, SU...)", key, path)
	}
	defer wipe(seed)
	if prefix, _, err := nkeys.DecodeSeed(seed); err != nil || prefix != nkeys.PrefixByteUser {
		return fmt.Errorf("%s %s: not a user's seed (a user seed starts with SU)", key, path)
	}
	return nil
}

// checkCAFile checks that path holds PEM certificates, all parsing.
func checkCAFile(path string) error {
	const key = "nats.tls.ca_file"
	b, err := readFile(key, path)
	if err != nil {
		return err
	}
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("%s %s: certificate %d does not parse: %w", key, path, n+1, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s %s: not a PEM certificate (no -----BEGIN CERTIFICATE----- block)", key, path)
	}
	return nil
}

// checkClientCert checks the client certificate and its key: both PEM,
// the key the certificate's, the certificate current.
func checkClientCert(certFile, keyFile string) error {
	cb, err := readFile("nats.tls.cert_file", certFile)
	if err != nil {
		return err
	}
	kb, err := readFile("nats.tls.key_file", keyFile)
	if err != nil {
		return err
	}
	defer wipe(kb)
	block, _ := pem.Decode(cb)
	if block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("nats.tls.cert_file %s: not a PEM certificate (no -----BEGIN CERTIFICATE----- block first)", certFile)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("nats.tls.cert_file %s: the certificate does not parse: %w", certFile, err)
	}
	if kblock, _ := pem.Decode(kb); kblock == nil || !strings.Contains(kblock.Type, "PRIVATE KEY") {
		return fmt.Errorf("nats.tls.key_file %s: not a PEM private key (no -----BEGIN ... PRIVATE KEY----- block)", keyFile)
	}
	if _, err := tls.X509KeyPair(cb, kb); err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return fmt.Errorf("nats.tls.key_file %s: the key does not match the certificate in nats.tls.cert_file %s", keyFile, certFile)
		}
		return fmt.Errorf("nats.tls.cert_file %s, key_file %s: %w", certFile, keyFile, err)
	}
	now := time.Now()
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("nats.tls.cert_file %s: the certificate expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("nats.tls.cert_file %s: the certificate is not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// wipe overwrites secret bytes once read, as nats.go does with seeds.
func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// refusal returns err explained when it is the server, or this client,
// refusing the connection's credentials or TLS, which waiting will not
// change; nil for any other error (a server down or restarting). The
// result wraps err.
func refusal(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		hostname  x509.HostnameError
		verify    *tls.CertificateVerificationError
		recordHdr tls.RecordHeaderError
	)
	msg := strings.ToLower(err.Error())
	var hint string
	switch {
	case errors.Is(err, nats.ErrAuthorization):
		hint = "the server refused this client's user: check nats.credentials_file (NATS_CREDS), nats.nkey_seed_file (NATS_NKEY) " +
			"or the user and password in NATS_URL, and that the user's account is known to the server"
	case errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAccountAuthExpired):
		hint = "the server says the user's or account's JWT has expired: issue new credentials"
	case errors.Is(err, nats.ErrAuthRevoked):
		hint = "the server says the user's credentials were revoked: issue new credentials"
	case errors.As(err, &unknownCA):
		hint = "the server's certificate is not signed by a CA this client trusts: set nats.tls.ca_file (NATS_CA) to the CA that signed it"
	case errors.As(err, &hostname):
		hint = "the server's certificate is not for the host in NATS_URL: use a host name the certificate names"
	case errors.As(err, &invalid):
		hint = "the server's certificate is not valid (expired, or not for a server): check the server's tls block"
	case errors.As(err, &verify):
		hint = "the server's certificate did not verify: check nats.tls.ca_file (NATS_CA)"
	// A TLS alert the server sent arrives as a net.OpError around an
	// unexported type: only its text tells which.
	case strings.Contains(msg, "remote error: tls: certificate required"):
		hint = "the server requires a client certificate signed by a CA it trusts: set nats.tls.cert_file and nats.tls.key_file " +
			"(NATS_CERT, NATS_KEY) to one (a certificate the server's CA did not sign is not sent)"
	case strings.Contains(msg, "remote error: tls: bad certificate"), strings.Contains(msg, "remote error: tls: unknown certificate"):
		// nats-server 2.9 answers a missing certificate so too.
		hint = "the server refused this client's certificate, or that it sent none: set nats.tls.cert_file and nats.tls.key_file " +
			"(NATS_CERT, NATS_KEY) to a client certificate signed by a CA the server trusts"
	case errors.Is(err, nats.ErrTLS) && strings.Contains(msg, "closed by remote after tls handshake"):
		// Under TLS 1.3 the server checks the client's certificate after
		// the handshake; depending on timing the client then reads the
		// alert above or finds the connection closed (nats.go's
		// tlsHandshakeEOF says as much).
		hint = "the server closed the connection after the TLS handshake, as it does when it gets no client certificate or one it does not trust: " +
			"set nats.tls.cert_file and nats.tls.key_file (NATS_CERT, NATS_KEY) to a certificate signed by a CA the server trusts"
	case strings.Contains(msg, "remote error: tls:"):
		hint = "the server ended the TLS handshake"
	case errors.Is(err, nats.ErrSecureConnWanted):
		hint = "TLS is configured (a tls:// URL or nats.tls files) but the server does not offer it"
	case errors.As(err, &recordHdr):
		hint = "the server did not answer in TLS"
	default:
		return nil
	}
	return &refusedError{hint: hint, err: err}
}

// refusedError is a connection refused for its credentials or TLS.
type refusedError struct {
	hint string
	err  error
}

func (e *refusedError) Error() string { return e.hint + ": " + e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// IsRefused reports whether err (from Connect) is the server or this
// client refusing the connection's credentials or TLS, which Connect did
// not retry and a caller waiting for NATS should not retry either.
func IsRefused(err error) bool {
	_, ok := errors.AsType[*refusedError](err)
	return ok
}
