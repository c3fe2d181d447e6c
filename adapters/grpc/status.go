package idemgrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// How a call's outcome is kept in a record. The Engine records a response
// by its HTTP status: 2xx, 3xx and 4xx except 408, 409, 425 and 429; any
// other releases the key. A call's gRPC code is written as one of them:
//
//	OK                                  200, the body the reply message
//	a recorded code c (1 to 16)         460+c, the body the google.rpc.Status (code, message, details)
//	a code that is not recorded         500+c, nothing kept: the key is released
//
// 461 to 476 are all in the range the Engine stores, and none of them is
// 408, 409, 425 or 429, so every recorded code comes back as itself.
const (
	statusOK          = 200
	statusRecorded    = 460
	statusNotRecorded = 500
)

// Recorded reports whether a call that ended with code c is recorded and
// replayed to its retries. Not recorded, so that a retry runs the handler
// again: the codes that say the same call may succeed later (UNAVAILABLE,
// RESOURCE_EXHAUSTED, ABORTED, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN); the
// server's faults, which HTTP answers with a 5xx that is never recorded
// either (UNIMPLEMENTED is HTTP's 501, DATA_LOSS its 500: a deployment or
// a repair may cure them); and CANCELLED, which reports what became of one
// call (its client went away, or the handler gave up when its context was
// cancelled), not of the operation: a retry must not be told "cancelled"
// for as long as the record lives. Codes beyond UNAUTHENTICATED, which gRPC
// does not define, are not recorded either.
func Recorded(c codes.Code) bool {
	switch c {
	case codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unavailable, codes.Unimplemented, codes.DataLoss:
		return false
	}
	return c <= codes.Unauthenticated
}

// lockStatus is the status under which the outcome code c is handed to
// Lock.Finish.
func lockStatus(c codes.Code) int {
	switch {
	case c == codes.OK:
		return statusOK
	case Recorded(c):
		return statusRecorded + int(c)
	}
	return statusNotRecorded + int(c)
}

// recordedCode reads the code back from a recorded status; ok is false for
// a status no call is recorded under.
func recordedCode(s int) (c codes.Code, ok bool) {
	if s == statusOK {
		return codes.OK, true
	}
	c = codes.Code(s - statusRecorded)
	if s > statusRecorded && Recorded(c) {
		return c, true
	}
	return 0, false
}

// refusal is how the interceptor answers one of the Engine's problems.
type refusal struct {
	problem string // an exchange.Problem… name
	code    codes.Code
	// retry: the answer carries when to retry, as a RetryInfo detail and
	// in the grpc-retry-pushback-ms trailer, which gRPC's own retries obey.
	retry bool
	// message, if set, replaces the problem's detail, which speaks of HTTP
	// headers; %s is the key's metadata name.
	message string
}

// refusals maps the policy's outcomes to gRPC codes, after Google's
// mapping of HTTP statuses (AIP-193) where one fits. It is documented in a
// table in the README and in docs/policy.md, which tests check against it.
//
//   - A call still running is ABORTED, gRPC's code for a concurrency
//     conflict to retry at a higher level, as HTTP's 409 is.
//   - A request message over the limit is RESOURCE_EXHAUSTED, the code gRPC
//     itself answers a message over its MaxRecvMsgSize with, so a client
//     meets the same code whichever limit its message crossed. Without
//     RetryInfo: no retry makes the message smaller. A full store is
//     RESOURCE_EXHAUSTED too, as HTTP's 429 is, but with RetryInfo.
//   - A key reused with another call is FAILED_PRECONDITION: the call is
//     refused for what the key already stands for, and must change.
var refusals = []refusal{
	{problem: exchange.ProblemKeyMissing, code: codes.InvalidArgument, message: "This call requires an %s metadata entry."},
	{problem: exchange.ProblemKeyInvalid, code: codes.InvalidArgument},
	{problem: exchange.ProblemKeyReused, code: codes.FailedPrecondition,
		message: "This %s was already used with a different call (another method or request message)."},
	{problem: exchange.ProblemInProgress, code: codes.Aborted, retry: true,
		message: "A call with this %s is still being processed. Retry after the delay in its RetryInfo."},
	{problem: exchange.ProblemPayloadTooLarge, code: codes.ResourceExhausted},
	{problem: exchange.ProblemStoreUnavailable, code: codes.Unavailable, retry: true},
	{problem: exchange.ProblemStoreFull, code: codes.ResourceExhausted, retry: true},
}

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail every
// refusal of the interceptor carries. Its reason is the problem type's
// name in upper case with underscores (KEY_MISSING, REQUEST_IN_PROGRESS),
// and its metadata "type" the problem type's URI (idem.Config.ProblemBase
// and the name), which documents it.
const ErrorDomain = "idemkit"

// preparedRefusal is a refusal with the details it sends, made once.
type preparedRefusal struct {
	refusal
	details []*anypb.Any
}

// refuser turns the Engine's problem responses into gRPC statuses.
type refuser struct {
	base     string // idem.Config.ProblemBase
	byName   map[string]*preparedRefusal
	pushback metadata.MD
	canceled error
	// keyWords rewrites the key parser's words, which speak of an HTTP
	// header, into the words of where this server takes the key from.
	keyWords *strings.Replacer
	// stoppedDetails are the details of the answer for a handler the
	// Engine stopped, by cause (see stopped).
	timeoutDetails, leaseDetails []*anypb.Any
	// notAccepted refuses a key sent to a method that is not guarded.
	notAccepted error
}

// Where the key comes from, in the key parser's words and in the words of
// a gRPC server: its metadata (%s is the entry's name), or the request
// (WithKey).
var (
	keyHTTPWords     = []string{"more than one Idempotency-Key field line", "empty Idempotency-Key field"}
	keyMetadataWords = []string{"more than one %s metadata value", "empty %s metadata value"}
	keyRequestWords  = []string{"more than one key", "empty key"}
)

// The reasons of the ErrorInfo of the answers that are no problem of the
// Engine's: a handler the Engine stopped, and a key sent where none is
// taken.
const (
	reasonHandlerTimeout = "HANDLER_TIMEOUT"
	reasonLeaseLost      = "LEASE_LOST"
	reasonKeyNotAccepted = "KEY_NOT_ACCEPTED"
)

func newRefuser(cfg idem.Config, keyName string, keyFromRequest bool) *refuser {
	r := &refuser{
		base:     cfg.ProblemBase,
		byName:   map[string]*preparedRefusal{},
		pushback: metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(cfg.RetryAfter.Milliseconds(), 10)),
		canceled: status.Error(codes.Canceled, "The client went away before its idempotency key was taken."),
	}
	words := make([]string, 0, 2*len(keyHTTPWords))
	for i, w := range keyHTTPWords {
		if keyFromRequest {
			words = append(words, w, keyRequestWords[i])
		} else {
			words = append(words, w, fmt.Sprintf(keyMetadataWords[i], keyName))
		}
	}
	r.keyWords = strings.NewReplacer(words...)
	retryInfo := mustAny(&errdetails.RetryInfo{RetryDelay: durationpb.New(cfg.RetryAfter)})
	info := func(reason string) *anypb.Any {
		return mustAny(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	}
	r.timeoutDetails = []*anypb.Any{info(reasonHandlerTimeout), retryInfo}
	r.leaseDetails = []*anypb.Any{info(reasonLeaseLost), retryInfo}
	r.notAccepted = status.ErrorProto(&spb.Status{Code: int32(codes.FailedPrecondition), Details: []*anypb.Any{info(reasonKeyNotAccepted)},
		Message: fmt.Sprintf("This method is not guarded, so a retry would run it again: the server does not accept an %s on it. "+
			"Send the call without one, or have the server guard the method.", keyName)})
	for _, f := range refusals {
		p := &preparedRefusal{refusal: f}
		if f.message != "" {
			p.message = fmt.Sprintf(f.message, keyName)
		}
		if f.problem == exchange.ProblemKeyMissing && keyFromRequest {
			p.message = "This call carries no idempotency key: this server takes it from the request message."
		}
		if f.problem == exchange.ProblemPayloadTooLarge {
			p.message = fmt.Sprintf("The request message exceeds the limit of %d bytes.", cfg.MaxRequestBody)
		}
		p.details = []*anypb.Any{mustAny(&errdetails.ErrorInfo{
			Reason:   errorReason(f.problem),
			Domain:   ErrorDomain,
			Metadata: map[string]string{"type": cfg.ProblemBase + f.problem},
		})}
		if f.retry {
			p.details = append(p.details, retryInfo)
		}
		r.byName[f.problem] = p
	}
	return r
}

// errorReason is the ErrorInfo reason of a problem type: key-missing is
// KEY_MISSING.
func errorReason(problem string) string {
	return strings.ToUpper(strings.ReplaceAll(problem, "-", "_"))
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("idemgrpc: " + err.Error()) // a well-known message always marshals
	}
	return a
}

// refuse answers resp, one of the Engine's own responses (a problem, or
// the empty answer to a client gone before its key was taken), as a gRPC
// status, and sets the retry trailer on ctx's call when it asks for one.
func (r *refuser) refuse(ctx context.Context, resp exchange.Response) error {
	typ := problemMember(resp.Body, typeMember)
	p := r.byName[strings.TrimPrefix(typ, r.base)]
	switch {
	case typ == "" && resp.Status == statusClientGone:
		return r.canceled
	case p == nil || !strings.HasPrefix(typ, r.base):
		// Not one the policy gives a problem type for (body-unreadable
		// cannot happen: the interceptor hands Begin the message in memory).
		return status.Error(codes.Internal, problemMember(resp.Body, detailMember))
	}
	msg := p.message
	if msg == "" {
		msg = problemMember(resp.Body, detailMember)
	}
	if p.problem == exchange.ProblemKeyInvalid {
		msg = r.keyWords.Replace(msg)
	}
	if stream := grpc.ServerTransportStreamFromContext(ctx); p.retry && stream != nil { // none outside a gRPC server
		_ = stream.SetTrailer(r.pushback)
	}
	return status.ErrorProto(&spb.Status{Code: int32(p.code), Message: msg, Details: p.details})
}

// statusClientGone is the Engine's status for a call whose client went
// away before its key was taken (nginx's 499, which nobody reads).
const statusClientGone = 499

// The members of a problem document the interceptor reads.
var (
	typeMember   = []byte(`"type":"`)
	detailMember = []byte(`"detail":"`)
)

// problemMember returns the value of a string member of a problem
// document as the Engine renders it (exchange.Problem.Response), or "". The
// Engine escapes only '"', '\' and control characters (as \u00XX), all of
// them escapes of Go string literals too, so strconv.Unquote decodes the
// value; a key found inside another string would be preceded by a
// backslash, so the first match is the member. It spares every refusal a
// JSON decoder: refusals come in storms (a retrying client meets ABORTED
// until the first call ends).
func problemMember(body, member []byte) string {
	i := bytes.Index(body, member)
	if i < 0 {
		return ""
	}
	open := i + len(member) - 1
	for j := open + 1; j < len(body); j++ {
		switch body[j] {
		case '\\':
			j++
		case '"':
			s, err := strconv.Unquote(string(body[open : j+1]))
			if err != nil {
				return ""
			}
			return s
		}
	}
	return ""
}

// stopped is the answer to a call whose handler the Engine stopped, for
// cause (its HandlerTimeout, or a lost lease), and that answered with its
// context's error: nothing was recorded, and the caller, who cancelled
// nothing, may retry with its key. UNAVAILABLE, which clients retry, with
// a RetryInfo and the pushback trailer; not CANCELLED, which says the
// caller gave up and which no client retries.
func (r *refuser) stopped(ctx context.Context, cause error) error {
	details, what := r.timeoutDetails, "ran out of time"
	if errors.Is(cause, idem.ErrLeaseLost) {
		details, what = r.leaseDetails, "lost its hold on the key"
	}
	if stream := grpc.ServerTransportStreamFromContext(ctx); stream != nil {
		_ = stream.SetTrailer(r.pushback)
	}
	return status.ErrorProto(&spb.Status{Code: int32(codes.Unavailable), Details: details,
		Message: fmt.Sprintf("The call's handler %s and was stopped (%v); nothing was recorded. Retry with the same key.", what, cause)})
}
