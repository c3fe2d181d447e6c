package payments

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The payment provider deduplicates by idempotency key, and may remember a
// key longer than the demo remembers its own request keys (the simulated
// provider keeps them DefaultKeyRetention, whatever -ttl says). A request
// key whose record expired is new again, as the policy says; given the
// provider key of the key's earlier charge, its next charge would get that
// charge's authorization back, taking no money for a new charge, and with
// another payment it would be refused. Yet every attempt of one charge
// must give the provider one same key, or a retry after a lost answer
// takes the money twice.
//
// So the demo counts the uses of each request key: the executions of it
// the provider answered for good (a charge written, or a decline), one row
// per key in the table key_uses. An attempt reads the count before it asks
// the provider, and gives it the provider key of that use (useKey); the use
// is counted in the transaction that writes its outcome, which commits
// with the stored response when the records are in the database. Every
// attempt of one use reads the same count, since none of them has
// committed; the key's next use, once its record expired, reads one more.

// KeyUse is how often a request key was used: how many of its executions
// the provider answered for good.
type KeyUse struct {
	RequestKey string `gorm:"primaryKey;size:80"`
	Uses       int64  `gorm:"not null"`
}

// errUseTaken: another attempt of the same use of the key counted it
// first. With the records in the database, only an attempt whose lease
// was taken over can meet that: its own completion would fail too.
var errUseTaken = fmt.Errorf("%w: another attempt completed this use of the key", ErrLeaseLost)

// useKey is the payment provider's idempotency key for use n (counted
// from 0) of the request key key: key itself for the first use, and a
// hash of the two for the later ones.
func useKey(key string, n int64) string {
	if n == 0 {
		return key
	}
	h := sha256.New()
	var b [binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], uint64(len(key)))])
	h.Write([]byte(key))
	h.Write(b[:binary.PutVarint(b[:], n)])
	return "idem_" + hex.EncodeToString(h.Sum(nil))
}

// keyUses returns how many uses of key are counted.
func keyUses(db *gorm.DB, key string) (int64, error) {
	var u KeyUse
	err := db.Where("request_key = ?", key).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, nil
	}
	return u.Uses, err
}

// countUse counts, in tx, the use of key that an attempt began after seen
// uses: errUseTaken if another attempt counted it first.
func countUse(tx *gorm.DB, key string, seen int64) error {
	var res *gorm.DB
	if seen == 0 {
		res = tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&KeyUse{RequestKey: key, Uses: 1})
	} else {
		res = tx.Model(&KeyUse{}).Where("request_key = ? AND uses = ?", key, seen).Update("uses", seen+1)
	}
	switch {
	case res.Error != nil:
		return res.Error
	case res.RowsAffected == 0:
		return errUseTaken
	}
	return nil
}
