// Package certs keeps a certificate, its key and a CA bundle read from PEM
// files, and reads them again when the files change, so that a silo picks
// up rotated certificates without a restart. It makes the tls.Configs of
// mutual TLS between silos (MutualTLS), where both ends present a
// certificate of the same CA and each checks the other's name itself
// (a silo is reached at an IP address, which its certificate need not
// name).
//
//	f, err := certs.Open(certs.Files{Cert: "peer.crt", Key: "peer.key", CA: "ca.crt"})
//	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(f.ServerConfig())))
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of one end of mutual TLS.
type Files struct {
	// Cert and Key are this end's certificate (with its chain) and key.
	Cert, Key string
	// CA holds the certificates that sign the other ends'.
	CA string
}

// Reloader holds what Files name, read again (on the next handshake) once
// any of the files has a new modification time or size. A read that fails
// (a file half-written during a rotation) keeps what was loaded before and
// is tried again at the next handshake. Its methods are safe for concurrent
// use.
type Reloader struct {
	files    Files
	minCheck time.Duration // how often, at most, the files are looked at

	mu      sync.Mutex
	checked time.Time
	stamp   [3]fileStamp
	cert    *tls.Certificate
	pool    *x509.CertPool
	lastErr error
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// Open reads the files; an error names the file that is missing or bad.
func Open(f Files) (*Reloader, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("certs: a certificate, its key and a CA file are all needed")
	}
	r := &Reloader{files: f, minCheck: time.Second}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// load reads the three files. r.mu is held (or r is not shared yet).
func (r *Reloader) load() error {
	var st [3]fileStamp
	for i, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		s, err := stampOf(p)
		if err != nil {
			return fmt.Errorf("certs: %w", err)
		}
		st[i] = s
	}
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("certs: %s and %s: %w", r.files.Cert, r.files.Key, err)
	}
	pem, err := os.ReadFile(r.files.CA)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("certs: %s holds no PEM certificate", r.files.CA)
	}
	r.cert, r.pool, r.stamp = &cert, pool, st
	return nil
}

// current returns the certificate and CA pool, read again first if a file
// changed.
func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= r.minCheck {
		r.checked = now
		changed := false
		for i, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
			if s, err := stampOf(p); err != nil || s != r.stamp[i] {
				changed = true
			}
		}
		if changed {
			r.lastErr = r.load()
		}
	}
	return r.cert, r.pool
}

// Err returns the error of the last reload that failed, or nil if the
// last one succeeded: a rotation that did not take.
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Leaf returns the current certificate, parsed.
func (r *Reloader) Leaf() (*x509.Certificate, error) {
	c, _ := r.current()
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	return x509.ParseCertificate(c.Certificate[0])
}

// verify checks that chain (the other end's certificates, leaf first) is
// signed by the current CA for usage.
func (r *Reloader) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errors.New("certs: the other end presented no certificate")
	}
	_, pool := r.current()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// ServerConfig is the tls.Config of the accepting end: it presents the
// current certificate and requires one of the CA from the other end.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _ := r.current()
			return c, nil
		},
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return r.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
		},
	}
}

// ClientConfig is the tls.Config of the dialing end: it presents the
// current certificate and checks that the other end's is of the CA. It
// does not check the host name (a silo is dialled at an IP address): the
// caller checks the name the certificate gives (Names).
func (r *Reloader) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := r.current()
			return c, nil
		},
		// The chain is verified by VerifyConnection, against the current
		// CA; the name by the caller.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return r.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		},
	}
}

// Names returns the names a certificate gives: its DNS names and its
// subject's common name.
func Names(c *x509.Certificate) []string {
	out := append([]string(nil), c.DNSNames...)
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

// NameOK reports whether c names name (a DNS name or its common name).
func NameOK(c *x509.Certificate, name string) bool {
	for _, n := range Names(c) {
		if n == name {
			return true
		}
	}
	return false
}
