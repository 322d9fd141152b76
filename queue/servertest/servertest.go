// Package servertest starts private NATS servers for tests (the
// nats-server module in the test's process, or the machine's nats-server
// binary as a process; on loopback ports and store directories under
// t.TempDir()), with the material a secured production
// server asks for: a CA and certificates made with crypto/x509, and an
// operator, accounts and users made with the nats-io jwt and nkeys
// modules. It also starts JetStream clusters of several servers. Nothing
// here touches the machine's shared NATS.
package servertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/extractq/extractq/internal/testsignal"
)

// Start starts a server from conf, the text of a nats-server configuration
// file (written to a temporary directory, so relative paths in it are
// relative to that directory), listening on a free loopback port, with
// JetStream on and its store under t.TempDir(). It is shut down in t.Cleanup.
func Start(t testing.TB, conf string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("servertest: %s: %v\n%s", path, err, conf)
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.JetStream, opts.StoreDir = true, filepath.Join(dir, "store")
	opts.NoSigs, opts.NoLog = true, true
	return run(t, opts)
}

func run(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	go s.Start()
	// A loaded 2-core machine (another test inserting a million rows)
	// once took over 10s to ready one server of a 3-server cluster: the
	// bound is generous, and passing it is a failure, not a wait.
	if !s.ReadyForConnections(60 * time.Second) {
		s.Shutdown()
		t.Fatal("servertest: server not ready after 60s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Binary is the nats-server program StartBinary runs: NATS_SERVER_BIN,
// else Debian's /usr/sbin/nats-server (2.9 on Debian 12); "" when neither
// exists.
func Binary() string {
	for _, p := range []string{os.Getenv("NATS_SERVER_BIN"), "/usr/sbin/nats-server"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// StartBinary runs Binary() as a process on conf (nats-server
// configuration text), listening on a free loopback port with JetStream's
// store under t.TempDir(), and returns its address (host:port). It skips
// the test when there is no binary. The process is killed in t.Cleanup
// (and by the kernel if the test process dies).
func StartBinary(t testing.TB, conf string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return startBinary(t, addr, fmt.Sprintf("listen: %q\n", addr)+conf)
}

// StartBinaryCluster runs size processes of Binary() as one JetStream
// cluster, routed to each other on loopback ports, and returns their
// client addresses. It skips the test when there is no binary. The
// cluster may still be electing its JetStream leader when it returns.
func StartBinaryCluster(t testing.TB, size int) []string {
	t.Helper()
	routes := make([]string, size)
	clusterPorts := make([]int, size)
	for i := range routes {
		clusterPorts[i] = freePort(t)
		routes[i] = fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", clusterPorts[i]))
	}
	addrs := make([]string, size)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		startBinary(t, addrs[i], fmt.Sprintf("server_name: n%d\nlisten: %q\ncluster {\n  name: extractq-test\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n",
			i+1, addrs[i], clusterPorts[i], strings.Join(routes, ", ")))
	}
	return addrs
}

func startBinary(t testing.TB, addr, conf string) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no nats-server binary (NATS_SERVER_BIN, /usr/sbin/nats-server)")
	}
	dir := t.TempDir()
	conf += fmt.Sprintf("jetstream {\n  store_dir: %q\n}\n", filepath.Join(dir, "store"))
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "nats-server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("servertest: %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	testsignal.Eventually(t, 20*time.Second, bin+" listening on "+addr+" (log "+logPath+")", func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("servertest: %s exited:\n%s", bin, b)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return addr
}

// URL is s's client URL with the scheme given ("nats" or "tls").
func URL(s *server.Server, scheme string) string {
	return scheme + "://" + s.Addr().String()
}

// PKI is a CA and the certificates it signed, as PEM files in Dir: one
// for a server on 127.0.0.1 and localhost, one for a client, and a client
// certificate that expired an hour ago.
type PKI struct {
	Dir                     string
	CAFile                  string
	ServerCert, ServerKey   string
	ClientCert, ClientKey   string
	ExpiredCert, ExpiredKey string
}

// NewPKI makes a CA named name and its certificates, valid for an hour.
func NewPKI(t testing.TB, name string) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		ExpiredCert: filepath.Join(dir, "expired.pem"), ExpiredKey: filepath.Join(dir, "expired-key.pem")}
	caKey := newKey(t)
	ca := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)
	ca, _ = x509.ParseCertificate(caDER)
	p.issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "nats-server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, p.ServerCert, p.ServerKey)
	p.issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "extractq"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.ClientCert, p.ClientKey)
	p.issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "extractq-expired"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotAfter:    time.Now().Add(-time.Hour),
	}, p.ExpiredCert, p.ExpiredKey)
	return p
}

func (p *PKI) issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-2 * time.Hour)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", kder)
}

// TLSBlock is the nats-server configuration block of a server using p's
// certificate; verify makes it require a client certificate signed by
// p's CA.
func (p *PKI) TLSBlock(verify bool) string {
	return fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: %v\n  timeout: 2\n}\n",
		p.ServerCert, p.ServerKey, p.CAFile, verify)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Operator is a NATS operator (JWT mode) and the accounts it signed, for
// a server with a MEMORY resolver preloaded with every account.
type Operator struct {
	dir      string
	jwt      string
	kp       nkeys.KeyPair
	accounts map[string]account
}

type account struct {
	kp  nkeys.KeyPair
	pub string
	jwt string
}

// NewOperator makes an operator with its system account, SYS.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "extractq-test"
	o := &Operator{dir: t.TempDir(), kp: okp, accounts: map[string]account{}}
	// JetStream in operator mode needs a system account.
	o.Account(t, "SYS", false)
	oc.SystemAccount = o.accounts["SYS"].pub
	if o.jwt, err = oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	return o
}

// Account makes an account named name signed by o, with JetStream
// (unlimited) when jetStream is true.
func (o *Operator) Account(t testing.TB, name string, jetStream bool) {
	t.Helper()
	akp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = name
	if jetStream {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	}
	ajwt, err := ac.Encode(o.kp)
	if err != nil {
		t.Fatal(err)
	}
	o.accounts[name] = account{kp: akp, pub: apub, jwt: ajwt}
}

// ConfigBlock is the nats-server configuration of o: the operator JWT,
// a MEMORY resolver and every account preloaded.
func (o *Operator) ConfigBlock(t testing.TB) string {
	t.Helper()
	path := filepath.Join(o.dir, "operator.jwt")
	if err := os.WriteFile(path, []byte(o.jwt), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n", path, o.accounts["SYS"].pub)
	for _, a := range o.accounts {
		fmt.Fprintf(&b, "  %s: %q\n", a.pub, a.jwt)
	}
	b.WriteString("}\n")
	return b.String()
}

// UserCreds makes a user of the account named and writes its credentials
// file (the user JWT and seed, as nsc writes it); it returns its path.
func (o *Operator) UserCreds(t testing.TB, accountName string) string {
	t.Helper()
	a, ok := o.accounts[accountName]
	if !ok {
		t.Fatalf("servertest: no account %q", accountName)
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "extractq"
	ujwt, err := uc.Encode(a.kp)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(o.dir, accountName+"-*.creds")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(creds); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// NKeyUser makes a user NKey and writes its seed to a file; it returns
// the public key (for the server's authorization block) and the file.
func NKeyUser(t testing.TB) (pub, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, seedFile
}

// StartCluster starts a JetStream cluster of size servers in this
// process, routed to each other on loopback ports, each with its own store
// under t.TempDir(). It returns once every server accepts clients and the
// JetStream meta group has a leader that sees every peer; they are shut
// down in t.Cleanup.
func StartCluster(t testing.TB, size int) []*server.Server {
	t.Helper()
	ports := make([]int, size)
	routes := make([]string, size)
	for i := range ports {
		ports[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	servers := make([]*server.Server, size)
	for i := range servers {
		servers[i] = run(t, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: filepath.Join(t.TempDir(), "store"),
			Cluster: server.ClusterOpts{Name: "extractq-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
			NoSigs:  true, NoLog: true,
		})
	}
	testsignal.Eventually(t, 60*time.Second, fmt.Sprintf("a JetStream meta leader seeing all %d servers", size), func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return len(s.JetStreamClusterPeers()) == size
			}
		}
		return false
	})
	return servers
}

// ClusterURLs is the comma-separated client URLs of servers, as NATS_URL
// lists them.
func ClusterURLs(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = URL(s, "nats")
	}
	return strings.Join(urls, ",")
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
