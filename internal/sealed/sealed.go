// Package sealed keeps secrets at rest: values sealed with AES-256-GCM under the operator's key
// (PANDASTACK_SECRETS_KEY), or marked plain when no key is configured (still never answered or
// logged). Functions' and apps' secrets (maps) and databases' passwords (bytes) are stored this
// way: "gcm:" + base64(nonce ‖ sealed), or "plain:" + base64(bytes).
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

// Seal turns secrets into their stored form (SealBytes of their JSON); none is "".
func Seal(key []byte, secrets map[string]string) (string, error) {
	if len(secrets) == 0 {
		return "", nil
	}
	plain, _ := json.Marshal(secrets)
	return SealBytes(key, plain)
}

// Open opens secrets sealed by Seal with the same key.
func Open(key []byte, stored string) (map[string]string, error) {
	out := map[string]string{}
	if stored == "" {
		return out, nil
	}
	plain, err := OpenBytes(key, stored)
	if err != nil {
		return nil, err
	}
	return out, json.Unmarshal(plain, &out)
}

// SealBytes turns a secret into its stored form: "gcm:" and the AES-256-GCM sealed bytes with key
// (32 bytes), or "plain:" and the bytes when key is empty.
func SealBytes(key, plain []byte) (string, error) {
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

// OpenBytes reverses SealBytes with the same key.
func OpenBytes(key []byte, stored string) ([]byte, error) {
	switch {
	case strings.HasPrefix(stored, "plain:"):
		return base64.StdEncoding.DecodeString(strings.TrimPrefix(stored, "plain:"))
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
			return nil, errors.New("a sealed secret is too short")
		}
		return gcm.Open(nil, b[:gcm.NonceSize()], b[gcm.NonceSize():], nil)
	}
	return nil, errors.New("unknown sealed form")
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
