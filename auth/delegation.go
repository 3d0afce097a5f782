package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc/codes"

	"github.com/agentsilo/agentsilo/errs"
)

// Delegator issues the tokens a cluster sends on a user's behalf to
// agents and servers outside it: short-lived JWTs it signs with its own
// key, naming the user (sub), the outside agent (aud) and the agent of the
// cluster that calls (act.sub, as in RFC 8693). It publishes its key as
// an OpenID provider does (Handler: discovery and a JWKS under its
// issuer), so the outside agent verifies the token with any OpenID
// library. Every silo of a cluster is given the same key and issuer, so
// the keys any of them publishes verify the tokens of all. Safe for
// concurrent use.
type Delegator struct {
	issuer string
	path   string // the issuer's path, where Handler serves
	alg    jose.SignatureAlgorithm
	jwk    jose.JSONWebKey // the public key
	signer jose.Signer
	ttl    time.Duration
	now    func() time.Time // the clock of the tokens' times
}

// DelegationTTL is how long a Delegator's tokens are valid.
const DelegationTTL = 5 * time.Minute

// NewDelegator reads the PEM private key in keyFile (RSA of 2048 bits or
// more, or ECDSA P-256) and returns a Delegator issuing tokens as issuer,
// an http(s) URL where its Handler is reached. A bad file or issuer is
// InvalidArgument.
func NewDelegator(issuer, keyFile string) (*Delegator, error) {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, errs.New(codes.InvalidArgument, "auth: delegation issuer %q: want http(s)://host[/path], where the silo's HTTP port is reached", issuer)
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "auth: delegation key: %w", err)
	}
	key, err := parseSigningKey(b)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "auth: delegation key %s: %w", keyFile, err)
	}
	d := &Delegator{issuer: strings.TrimSuffix(issuer, "/"), path: strings.TrimSuffix(u.Path, "/"), ttl: DelegationTTL, now: time.Now}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, errs.New(codes.InvalidArgument, "auth: delegation key %s: an RSA key of %d bits; want 2048 or more", keyFile, k.N.BitLen())
		}
		d.alg = jose.RS256
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, errs.New(codes.InvalidArgument, "auth: delegation key %s: want an ECDSA key on P-256", keyFile)
		}
		d.alg = jose.ES256
	default:
		return nil, errs.New(codes.InvalidArgument, "auth: delegation key %s: want an RSA or ECDSA P-256 key", keyFile)
	}
	d.jwk = jose.JSONWebKey{Key: key.Public(), Algorithm: string(d.alg), Use: "sig"}
	tp, err := d.jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "auth: delegation key %s: %w", keyFile, err)
	}
	d.jwk.KeyID = base64.RawURLEncoding.EncodeToString(tp)
	d.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: d.alg, Key: jose.JSONWebKey{Key: key, KeyID: d.jwk.KeyID}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, errs.New(codes.InvalidArgument, "auth: delegation key %s: %w", keyFile, err)
	}
	return d, nil
}

// parseSigningKey reads a PEM private key: PKCS#8, PKCS#1 (RSA) or SEC 1
// (EC).
func parseSigningKey(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errs.New(codes.InvalidArgument, "no PEM private key")
		}
		var k any
		var err error
		switch blk.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, errs.New(codes.InvalidArgument, "not a signing key")
		}
		return s, nil
	}
}

// Issuer is the issuer of the tokens.
func (d *Delegator) Issuer() string { return d.issuer }

// Token returns a token for principal, to be sent to audience (the
// outside agent's URL, scheme://host[:port]) by actor (the address of the
// agent that calls), valid for DelegationTTL, with scopes if any.
func (d *Delegator) Token(principal, audience, actor string, scopes []string) (string, error) {
	tok, _, err := d.sign(principal, audience, map[string]any{"sub": actor}, scopes, time.Time{})
	return tok, err
}

// sign signs a token for principal to audience, act its actor claim,
// valid for the Delegator's TTL but not past until (if set); it returns
// the token and its expiry.
func (d *Delegator) sign(principal, audience string, act map[string]any, scopes []string, until time.Time) (string, time.Time, error) {
	now := d.now()
	exp := now.Add(d.ttl)
	if !until.IsZero() && until.Before(exp) {
		exp = until
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", exp, errs.New(codes.Internal, "auth: a token id: %w", err)
	}
	claims := map[string]any{
		"iss": d.issuer, "sub": principal, "aud": audience,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": exp.Unix(),
		"jti": hex.EncodeToString(id[:]),
		"act": act,
	}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	b, err := json.Marshal(claims)
	if err != nil {
		return "", exp, errs.New(codes.Internal, "auth: delegation claims: %w", err)
	}
	jws, err := d.signer.Sign(b)
	if err != nil {
		return "", exp, errs.New(codes.Internal, "auth: signing a delegation token: %w", err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		return "", exp, errs.New(codes.Internal, "auth: a delegation token: %w", err)
	}
	return tok, exp, nil
}

// Handler serves the Delegator's discovery document
// (ISSUER/.well-known/openid-configuration) and its key
// (ISSUER/.well-known/jwks.json), for whoever verifies its tokens; the
// paths are under the issuer's own path. Mount it on "/.well-known/" of
// the issuer's path.
func (d *Delegator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+d.path+"/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                d.issuer,
			"jwks_uri":                              d.issuer + "/.well-known/jwks.json",
			"token_endpoint":                        d.TokenURL(),
			"grant_types_supported":                 []string{GrantTokenExchange},
			"id_token_signing_alg_values_supported": []string{string(d.alg)},
			"response_types_supported":              []string{"token"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("GET "+d.path+"/.well-known/jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{d.jwk}})
	})
	return mux
}

// Pattern is where Handler is mounted on a mux: the issuer's path's
// /.well-known/.
func (d *Delegator) Pattern() string { return d.path + "/.well-known/" }
