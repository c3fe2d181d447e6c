package api

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
)

// requestKeyBefore is RequestKey as it was when a request's scope was its
// account as it is: the hash the charges' rows and the payment provider
// were given then.
func requestKeyBefore(account, key string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(account)))])
	h.Write([]byte(account))
	h.Write([]byte(key))
	return "idem_" + hex.EncodeToString(h.Sum(nil))
}

// TestAccountScopes: no account's scope is a scope of the provider's, nor
// another account's, whatever the bearer tokens; an account whose name
// needs no escape keeps the scope it had (the account itself), and with
// it its records; and every account keeps the keys its rows and the
// payment provider were given.
func TestAccountScopes(t *testing.T) {
	accounts := []string{"acct_1", "provider-webhooks", "provider:webhooks", "provider:events", "account:provider:webhooks",
		"account:acct_1", "account:", "provider:", "Provider:webhooks", "accounts", " provider:webhooks"}
	scopes := map[string]string{}
	for _, a := range accounts {
		s := AccountScope(a)
		if s == WebhookScope || s == EventScope || strings.HasPrefix(s, providerScope) {
			t.Errorf("account %q has the scope %q, which begins as the provider's", a, s)
		}
		if prev, ok := scopes[s]; ok {
			t.Errorf("accounts %q and %q share the scope %q", prev, a, s)
		}
		scopes[s] = a
		if got, want := RequestKey(idem.ID{Scope: s, Key: "k"}), requestKeyBefore(a, "k"); got != want {
			t.Errorf("account %q: RequestKey %s, want %s, as before", a, got, want)
		}
	}
	for _, a := range []string{"acct_1", "provider-webhooks", "accounts", "Provider:webhooks"} {
		if AccountScope(a) != a {
			t.Errorf("account %q got the scope %q, want its own name, as before", a, AccountScope(a))
		}
	}
}
