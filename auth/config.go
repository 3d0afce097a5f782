package auth

// DefaultPrincipal is the principal of a caller that declares none (on a
// server without authentication).
const DefaultPrincipal = "dev"

// Config says how a server proves who its callers are. With neither API
// keys nor client certificates it takes the principal a caller declares,
// which the silo's servers allow only on a loopback address (or with
// --insecure).
type Config struct {
	// KeyFile is the API-key file (--auth-file): JSON
	// {"keys": [{"sha256": "<hex of the key>", "principal": "alice",
	// "groups": ["admins"]}]}. Clients send the key as `x-api-key`
	// metadata.
	KeyFile string
	// Keys are API keys given directly, beside those of KeyFile.
	Keys []APIKey
	// TLSCert and TLSKey are the server's certificate and key files
	// (--tls-cert, --tls-key): the server serves TLS.
	TLSCert, TLSKey string
	// TLSClientCA is a file of CA certificates (--tls-client-ca): clients
	// that present a certificate it signed are authenticated by it, as the
	// certificate's subject common name or, without one, its first DNS
	// name; its organizational units are the principal's groups. Without
	// API keys a client certificate is required.
	TLSClientCA string
	// OIDC, if its Issuer is set, accepts bearer tokens from an OpenID
	// provider: `authorization: Bearer TOKEN` gRPC metadata or HTTP
	// header. The token's principal and groups claims are the caller.
	OIDC OIDCConfig
}

// APIKey is one entry of the API-key file.
type APIKey struct {
	// SHA256 is the hex SHA-256 of the key; the key itself is not stored.
	SHA256 string `json:"sha256"`
	// Principal is who the key proves the caller is.
	Principal string `json:"principal"`
	// Groups are the principal's groups, for the ACL's `group:name` rules.
	Groups []string `json:"groups,omitempty"`
}

// Enabled reports whether c configures authentication (API keys, client
// certificates or OpenID tokens).
func (c *Config) Enabled() bool {
	return c.KeyFile != "" || len(c.Keys) > 0 || c.TLSClientCA != "" || c.OIDC.Enabled()
}
