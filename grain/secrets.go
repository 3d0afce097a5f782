package grain

import "strings"

// Secrets in agent configurations: the credentials that agents of the
// built-in A2A and MCP types (and any other) keep in their configuration
// (CreateAgent) are stored as given, but GetConfig shows them only to a
// caller that may Configure the agent (or administer the ACL); a caller
// that may only Read it sees Redacted in their place.

// Redacted stands for the value of a secret configuration key in what a
// caller without Configure reads back.
const Redacted = "<redacted>"

// SecretConfigKey reports whether a configuration key holds a secret:
// api_key, bearer_token, a header.* (headers carry credentials), or a key
// that names a secret, password, token, credential or API key (any case,
// e.g. OPENAI_API_KEY, client_secret, db.password).
func SecretConfigKey(key string) bool {
	k := strings.ToLower(key)
	if strings.HasPrefix(k, "header.") {
		return true
	}
	for _, w := range []string{"secret", "password", "passwd", "token", "credential", "api_key", "apikey", "api-key", "private_key"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// RedactConfig returns cfg with the values of its secret keys replaced by
// Redacted (cfg itself is left alone).
func RedactConfig(cfg map[string]string) map[string]string {
	if cfg == nil {
		return nil
	}
	out := make(map[string]string, len(cfg))
	for k, v := range cfg {
		if SecretConfigKey(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}
