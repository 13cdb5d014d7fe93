// Package sealed keeps secrets at rest: a map of names to values sealed with AES-256-GCM under
// the operator's key (PANDASTACK_SECRETS_KEY), or marked plain when no key is configured (still
// never answered or logged). Functions and apps store their secrets this way.
package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// Seal turns secrets into their stored form: "gcm:" and the AES-256-GCM sealed JSON with key
// (32 bytes), or "plain:" and the JSON when key is empty.
func Seal(key []byte, secrets map[string]string) (string, error) {
	if len(secrets) == 0 {
		return "", nil
	}
	plain, _ := json.Marshal(secrets)
	if len(key) == 0 {
		return "plain:" + base64.StdEncoding.EncodeToString(plain), nil
	}
	gcm, err := newGCM(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return "gcm:" + base64.StdEncoding.EncodeToString(gcm.Seal(nonce, nonce, plain, nil)), nil
}

// Open opens secrets sealed by Seal with the same key.
func Open(key []byte, stored string) (map[string]string, error) {
	out := map[string]string{}
	var plain []byte
	switch {
	case stored == "":
		return out, nil
	case strings.HasPrefix(stored, "plain:"):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(stored, "plain:"))
		if err != nil {
			return nil, err
		}
		plain = b
	case strings.HasPrefix(stored, "gcm:"):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(stored, "gcm:"))
		if err != nil {
			return nil, err
		}
		gcm, err := newGCM(key)
		if err != nil {
			return nil, err
		}
		if len(b) < gcm.NonceSize() {
			return nil, errors.New("sealed secrets are too short")
		}
		if plain, err = gcm.Open(nil, b[:gcm.NonceSize()], b[gcm.NonceSize():], nil); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("unknown sealed form")
	}
	return out, json.Unmarshal(plain, &out)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, errors.New("the secrets key must be 32 bytes")
	}
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(blk)
}
