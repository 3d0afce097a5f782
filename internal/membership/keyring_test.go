package membership

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	k16, k32 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 32)
	b64 := base64.StdEncoding.EncodeToString
	write := func(content string) string {
		path := filepath.Join(dir, "keys")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		// A new modification time, even on a coarse clock.
		later := time.Now().Add(time.Duration(len(content)) * time.Second)
		if err := os.Chtimes(path, later, later); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for content, want := range map[string]string{
		"":                          "holds no key",
		"not base64!\n":             "not base64",
		b64([]byte("short")) + "\n": "a key of 5 bytes",
	} {
		if _, err := ReadKeyFile(write(content)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("key file %q: %v, want %q", content, err, want)
		}
	}

	// Rotation: the ring follows the file, its first key primary.
	k, err := newKeyring(write("# keys\n" + b64(k16) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := k.reload(); changed || err != nil {
		t.Fatalf("reload of an unchanged file: %v, %v", changed, err)
	}
	steps := []struct {
		file    string
		primary []byte
		n       int
	}{
		{b64(k16) + "\n" + b64(k32) + "\n", k16, 2},   // add the new key
		{b64(k32) + "\n" + b64(k16) + "\n\n", k32, 2}, // use it
		{b64(k32) + "\n", k32, 1},                     // drop the old one
	}
	for i, s := range steps {
		write(s.file)
		if changed, err := k.reload(); !changed || err != nil {
			t.Fatalf("step %d: reload %v, %v", i, changed, err)
		}
		if got := k.ring.GetPrimaryKey(); !bytes.Equal(got, s.primary) || len(k.ring.GetKeys()) != s.n {
			t.Fatalf("step %d: primary %x of %d keys, want %x of %d", i, got, len(k.ring.GetKeys()), s.primary, s.n)
		}
	}
	// A broken file keeps the keys.
	write("garbage\n")
	if _, err := k.reload(); err == nil || len(k.ring.GetKeys()) != 1 {
		t.Fatalf("broken file: %v, %d keys", err, len(k.ring.GetKeys()))
	}
}
