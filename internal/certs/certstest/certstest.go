// Package certstest makes throwaway certificate authorities and the
// certificates they sign, written as PEM files, for tests and benchmark
// programs: silos' peer certificates, etcd's server and client
// certificates.
//
//	ca, err := certstest.NewCA(dir, "test CA")
//	cert, key, err := ca.Issue("s1", []string{"s1"}, nil)
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	Dir      string
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	serial   int64
}

// NewCA makes a CA named name and writes its certificate to dir/<name>.crt
// (spaces replaced).
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Dir: dir, cert: cert, key: key, serial: 1}
	ca.CertFile, err = write(dir, fileName(name)+".crt", "CERTIFICATE", der)
	if err != nil {
		return nil, err
	}
	return ca, nil
}

func fileName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == ' ' || c == '/' {
			b[i] = '_'
		}
	}
	return string(b)
}

func write(dir, name, typ string, der []byte) (string, error) {
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// Issue makes a certificate for both server and client use, with common
// name cn, DNS names dns and IP addresses ips, and writes it and its key to
// Dir as <cn>.crt and <cn>.key (an earlier pair of that name is replaced).
func (ca *CA) Issue(cn string, dns []string, ips []net.IP) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	// The key first, so that a reader that sees the new certificate finds
	// its key too.
	if keyFile, err = write(ca.Dir, fileName(cn)+".key", "EC PRIVATE KEY", kder); err != nil {
		return "", "", err
	}
	if certFile, err = write(ca.Dir, fileName(cn)+".crt", "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
