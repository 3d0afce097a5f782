package grain

import "testing"

func TestSecretConfigKey(t *testing.T) {
	for key, want := range map[string]bool{
		"api_key": true, "bearer_token": true, "header.X-Tenant": true, "HEADER.Authorization": true,
		"OPENAI_API_KEY": true, "client_secret": true, "db.password": true, "github-token": true, "apikey": true,
		"url": false, "card_url": false, "model": false, "transport": false, "headers": false, "keyboard": false,
	} {
		if got := SecretConfigKey(key); got != want {
			t.Errorf("SecretConfigKey(%q) = %v, want %v", key, got, want)
		}
	}
	cfg := map[string]string{"url": "u", "api_key": "k"}
	r := RedactConfig(cfg)
	if r["url"] != "u" || r["api_key"] != Redacted || cfg["api_key"] != "k" {
		t.Fatalf("RedactConfig = %v (input now %v)", r, cfg)
	}
	if RedactConfig(nil) != nil {
		t.Fatal("RedactConfig(nil) is not nil")
	}
}
