package sealed

import (
	"bytes"
	"strings"
	"testing"
)

// TestSeal: with a key, the stored form of secrets does not hold them and opens only with that
// key; without one they round-trip unsealed.
func TestSeal(t *testing.T) {
	secrets := map[string]string{"API_TOKEN": "s3cr3t-value"}
	key := bytes.Repeat([]byte{7}, 32)
	stored, err := Seal(key, secrets)
	if err != nil || !strings.HasPrefix(stored, "gcm:") || strings.Contains(stored, "s3cr3t") {
		t.Fatalf("sealed form %q %v", stored, err)
	}
	if got, err := Open(key, stored); err != nil || got["API_TOKEN"] != "s3cr3t-value" {
		t.Fatalf("unseal: %v %v", got, err)
	}
	if _, err := Open(bytes.Repeat([]byte{8}, 32), stored); err == nil {
		t.Fatal("another key opened the secrets")
	}
	stored, err = Seal(nil, secrets)
	if err != nil || !strings.HasPrefix(stored, "plain:") {
		t.Fatalf("unsealed form %q %v", stored, err)
	}
	if got, err := Open(nil, stored); err != nil || got["API_TOKEN"] != "s3cr3t-value" {
		t.Fatalf("round trip: %v %v", got, err)
	}
}
