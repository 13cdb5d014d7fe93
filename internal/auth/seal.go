package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
)

// Seal turns a secret into its stored form: "gcm:" and the AES-256-GCM sealed bytes with key
// (32 bytes; PANDASTACK_SECRETS_KEY), or "plain:" and the bytes when no key is configured.
// Either form is never answered or logged.
func Seal(key, plain []byte) (string, error) {
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

// Unseal reverses Seal with the same key.
func Unseal(key []byte, stored string) ([]byte, error) {
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
