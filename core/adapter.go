package idem

import (
	"context"
	"net/http"

	"github.com/idemkit/idemkit/core/exchange"
)

// Adapter returns the Engine as the adapters of a framework use it: what
// they hand it (exchange.Request) and what it tells them to do
// (exchange.Decision). A program that installs an adapter never needs it;
// package exchange documents it for those who write one.
func (e *Engine) Adapter() exchange.Engine { return (*port)(e) }

// port is the Engine seen through exchange.Engine, so that the methods
// only adapters call stay out of the Engine's own documentation.
type port Engine

func (p *port) Begin(ctx context.Context, r exchange.Request) exchange.Decision {
	return (*Engine)(p).begin(ctx, &r)
}

func (p *port) Guards(method string) bool { return (*Engine)(p).guards(method) }

func (p *port) HeaderName() string { return p.cfg.HeaderName }

func (p *port) HTTPRequest(r *http.Request) exchange.Request {
	return exchange.HTTPRequest(r, p.cfg.HeaderName)
}

func (p *port) WithheldResponse() exchange.Response { return (*Engine)(p).withheldResponse() }

func (p *port) BodyTooLarge(limit int64) exchange.Response { return (*Engine)(p).bodyTooLarge(limit) }
