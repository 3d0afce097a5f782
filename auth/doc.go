// Package auth proves who calls a silo. The gateway (gRPC), the A2A server
// and the MCP server (HTTP) share it, so a caller is the same principal,
// with the same groups, on every port:
//
//   - API keys: a file of SHA-256 key hashes (Config.KeyFile, the silo's
//     --auth-file), each naming a principal and its groups. Clients send the
//     key as `x-api-key` gRPC metadata or HTTP header (or, over HTTP, as
//     "Authorization: Bearer KEY").
//   - Mutual TLS: a client certificate signed by Config.TLSClientCA names
//     the principal (subject common name, else first DNS name); its
//     organizational units are the principal's groups.
//   - OpenID tokens: a bearer token ("authorization: Bearer TOKEN",
//     gRPC metadata or HTTP header) of the provider Config.OIDC names
//     (the silo's --oidc-issuer), checked against the provider's keys
//     (found by discovery, cached, fetched again on rotation), its issuer,
//     audience and expiry; its claims name the principal, its groups and
//     its scopes (acl.Caller.Scopes), which bound the skills it may call.
//   - None of these: the caller declares its principal (`x-agentsilo-principal`,
//     default DefaultPrincipal). A server that takes self-declared
//     principals serves only loopback (CheckLoopback) unless the silo runs
//     with --insecure.
//
// A program embedding a silo fills a Config (the silo's SiloConfig holds
// one); the servers make an Authenticator from it with New.
package auth
