package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/agentsilo/agentsilo/acl"
	"github.com/agentsilo/agentsilo/internal/certs/certstest"
	"github.com/agentsilo/agentsilo/internal/protocol"
)

// whoami serves every method: it answers the caller the interceptors put
// in the call's context, "principal group,group".
func whoami(t *testing.T, a *Authenticator) (tcp string, inproc *InProcess) {
	t.Helper()
	srv := grpc.NewServer(append(a.ServerOptions(), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
		c := acl.CallerFrom(ss.Context())
		if c == nil {
			return ss.SendMsg(wrapperspb.String("(declared)"))
		}
		return ss.SendMsg(wrapperspb.String(c.Principal + " " + strings.Join(c.Groups, ",")))
	}))...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inproc = NewInProcess()
	done := make(chan struct{}, 2)
	go func() { srv.Serve(lis); done <- struct{}{} }()
	go func() { srv.Serve(inproc); done <- struct{}{} }()
	t.Cleanup(func() { srv.Stop(); <-done; <-done })
	return lis.Addr().String(), inproc
}

func ask(ctx context.Context, t *testing.T, target string, creds credentials.TransportCredentials, dial func(context.Context, string) (net.Conn, error)) (string, error) {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out := new(wrapperspb.StringValue)
	err = conn.Invoke(ctx, "/test.Who/Am", wrapperspb.String("?"), out, grpc.OnFinish(func(error) {}))
	return out.GetValue(), err
}

// TestVouch: a vouched principal is taken on an in-process connection,
// with its groups, and refused (Unauthenticated) on a network connection,
// with or without other credentials, whatever the server's
// authentication; in-process calls that vouch for nobody are
// authenticated as any other.
func TestVouch(t *testing.T) {
	alice := &acl.Caller{Principal: "alice", Groups: []string{"admins", "ops"}}
	keyed, err := New(Config{Keys: []APIKey{{SHA256: keyHash("bob-key"), Principal: "bob"}}})
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]*Authenticator{"API keys": keyed, "no authentication": open} {
		t.Run(name, func(t *testing.T) {
			tcp, inproc := whoami(t, a)
			plain := insecure.NewCredentials()
			ctx := Vouch(t.Context(), alice)
			if got, err := ask(ctx, t, "passthrough:///x", plain, inproc.DialContext); err != nil || got != "alice admins,ops" {
				t.Errorf("vouched in-process: %q, %v", got, err)
			}
			if got, err := ask(ctx, t, tcp, plain, nil); status.Code(err) != codes.Unauthenticated {
				t.Errorf("vouched over TCP: %q, %v; want Unauthenticated", got, err)
			}
			withKey := metadata.AppendToOutgoingContext(ctx, protocol.APIKeyHeader, "bob-key")
			if got, err := ask(withKey, t, tcp, plain, nil); status.Code(err) != codes.Unauthenticated {
				t.Errorf("vouched over TCP with a key: %q, %v; want Unauthenticated", got, err)
			}
			groupsOnly := metadata.AppendToOutgoingContext(t.Context(), vouchedGroupsHeader, "admins")
			if got, err := ask(groupsOnly, t, tcp, plain, nil); status.Code(err) != codes.Unauthenticated {
				t.Errorf("vouched groups over TCP: %q, %v; want Unauthenticated", got, err)
			}
			bad := Vouch(t.Context(), &acl.Caller{Principal: "a b"})
			if _, err := ask(bad, t, "passthrough:///x", plain, inproc.DialContext); status.Code(err) != codes.InvalidArgument {
				t.Errorf("a malformed vouched principal: %v; want InvalidArgument", err)
			}
			got, err := ask(t.Context(), t, "passthrough:///x", plain, inproc.DialContext)
			if a.Enabled() && status.Code(err) != codes.Unauthenticated {
				t.Errorf("in-process, no credentials, on a server with keys: %q, %v; want Unauthenticated", got, err)
			}
			// (A stream without credentials carries no caller: a Session
			// declares its principal in its Hello.)
			if !a.Enabled() && (err != nil || got != "(declared)") {
				t.Errorf("in-process, no credentials, no authentication: %q, %v", got, err)
			}
		})
	}
}

// TestVouchOverTLS: on a server with mutual TLS the in-process connection
// skips the handshake; a network client proves itself by its certificate,
// and vouching beside it is refused.
func TestVouchOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certstest.NewCA(dir, "client CA")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := ca.Issue("gateway", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	carolCert, carolKey, err := ca.Issue("carol", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{TLSCert: srvCert, TLSKey: srvKey, TLSClientCA: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	tcp, inproc := whoami(t, a)
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(carolCert, carolKey)
	if err != nil {
		t.Fatal(err)
	}
	carol := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}})
	if got, err := ask(t.Context(), t, tcp, carol, nil); err != nil || got != "carol " {
		t.Errorf("carol's certificate: %q, %v", got, err)
	}
	ctx := Vouch(t.Context(), &acl.Caller{Principal: "alice"})
	if got, err := ask(ctx, t, tcp, carol, nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("carol vouching for alice: %q, %v; want Unauthenticated", got, err)
	}
	if got, err := ask(ctx, t, "passthrough:///x", insecure.NewCredentials(), inproc.DialContext); err != nil || got != "alice " {
		t.Errorf("vouched in-process: %q, %v", got, err)
	}
	// CertificateCaller reads a connection's verified certificate as the
	// gateway does, and nothing from an unverified one.
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	state := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	if c, err := a.CertificateCaller(&state); err != nil || c.Principal != "carol" {
		t.Errorf("CertificateCaller: %v, %v", c, err)
	}
	state.VerifiedChains = nil
	if c, err := a.CertificateCaller(&state); c != nil || err != nil {
		t.Errorf("CertificateCaller of an unverified certificate: %v, %v", c, err)
	}
	if c, err := open(t).CertificateCaller(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}); c != nil || err != nil {
		t.Errorf("CertificateCaller without client certificates configured: %v, %v", c, err)
	}
}

func open(t *testing.T) *Authenticator {
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
