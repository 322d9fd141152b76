// Package devstack starts and stops the private services and processes of
// the development harnesses (devtools/cmd/bench, devtools/cmd/chaos): child
// processes logging to files, free ports on 127.0.0.1, waits for a port or
// an HTTP endpoint to be ready, the commands built from the repository, a
// private Postgres cluster (initdb on its own port) and a private NATS
// server with JetStream (devtools/cmd/natsd on its own port and store).
//
// Nothing here touches a service the harness did not start: ports are
// asked of the kernel, and 5432 and 4222, the machine's shared Postgres
// and NATS, are never handed out. It is development tooling, not part of
// the product.
package devstack
