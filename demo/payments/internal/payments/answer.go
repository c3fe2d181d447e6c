package payments

import (
	"encoding/json"
	"time"
)

// A charge or refund is made by a request that may run more than once:
// its record lost (records in Redis) or its lease taken over, a retry
// runs the handler again and finds the row its key already wrote
// (CreateChargeOnce, CreateRefundOnce). That retry must get the answer the
// request got the first time, byte for byte, not the row as it is by
// then: a refund changes the charge's amount_refunded, and settlement the
// status of both. So the body of the first answer is rendered before the
// row is written and kept with it (Charge.Answer, Refund.Answer), in the
// same INSERT, and every later attempt is answered with those bytes.

// ChargeView is a charge as the API shows it.
type ChargeView struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Amount      int64  `json:"amount"`
	Refunded    int64  `json:"amount_refunded"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
	Status      string `json:"status"`
	Created     string `json:"created"`
}

// View is c as the API shows it now.
func (c Charge) View() ChargeView {
	return ChargeView{ID: c.ID, Object: "charge", Amount: c.Amount, Refunded: c.Refunded, Currency: c.Currency,
		Customer: c.Customer, Description: c.Description, Status: c.Status, Created: c.Created.UTC().Format(time.RFC3339)}
}

// FirstAnswer is the body the request that made c was first answered
// with: the bytes kept with the row, or for a row from before they were
// kept, the row as it is now.
func (c Charge) FirstAnswer() []byte { return firstAnswer(c.Answer, c.View()) }

// RefundView is a refund as the API shows it (its members in the order
// of their names, as the API wrote them before it kept its answers).
type RefundView struct {
	Amount  int64  `json:"amount"`
	Charge  string `json:"charge"`
	Created string `json:"created"`
	ID      string `json:"id"`
	Object  string `json:"object"`
	Status  string `json:"status"`
}

// View is r as the API shows it now.
func (r Refund) View() RefundView {
	return RefundView{Amount: r.Amount, Charge: r.Charge, Created: r.Created.UTC().Format(time.RFC3339), ID: r.ID, Object: "refund",
		Status: r.Status}
}

// FirstAnswer is Charge.FirstAnswer for a refund.
func (r Refund) FirstAnswer() []byte { return firstAnswer(r.Answer, r.View()) }

// firstAnswer is kept, or now rendered when nothing was kept.
func firstAnswer(kept []byte, now any) []byte {
	if kept != nil {
		return kept
	}
	return render(now)
}

// render is v's JSON, a view of plain strings and integers.
func render(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a struct of strings and integers
	}
	return b
}
