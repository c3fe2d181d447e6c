// Package exchange is what an idem.Engine and the code around it say to
// each other about one request: the Request an adapter describes, the
// Decision the Engine answers with, the Lock a handler runs under and what
// became of its result (Finished), and the Response a record keeps.
//
// It has two audiences, neither of them the users of idemkit, who need
// package idem alone:
//
//   - adapter authors, who turn a framework's request into a Request, hand
//     it to Begin (idem.Engine.Adapter), carry out the Decision, and end
//     the Lock: ResponseCapture, HTTPRequest and Decision.WriteTo are the
//     net/http glue every adapter built on net/http shares;
//   - store authors, whose records keep a Response (idem.Record.Response).
//
// An adapter is thin: it translates, and decides nothing. Every outcome of
// a Lock's end maps to what its client sees by one rule (Finished.Withhold;
// docs/policy.md has the table), and the conformance suite
// (idemtest.TestMiddleware) holds every adapter to the policy.
package exchange
