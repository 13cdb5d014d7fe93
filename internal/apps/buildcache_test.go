package apps

import "testing"

// TestSecretsKey: the key of a set of secrets changes with any value, name, addition or removal,
// not with the order they come in.
func TestSecretsKey(t *testing.T) {
	base := secretsKey(map[string]string{"A": "1", "B": "2"})
	if secretsKey(map[string]string{"B": "2", "A": "1"}) != base {
		t.Fatal("order changed the key")
	}
	for _, m := range []map[string]string{
		{"A": "1", "B": "3"}, {"A": "1", "C": "2"}, {"A": "1"}, {"A": "1", "B": "2", "C": "3"}, {}, nil,
		{"A": "1\x00B", "B": "2"}, {"A1": "", "B": "2"},
	} {
		if len(m) > 0 && secretsKey(m) == base {
			t.Errorf("%q has the key of A=1 B=2", m)
		}
	}
	if secretsKey(nil) != secretsKey(map[string]string{}) {
		t.Error("no secrets: two keys")
	}
}
