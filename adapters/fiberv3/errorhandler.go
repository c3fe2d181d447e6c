package idemfiber

import (
	"github.com/gofiber/fiber/v3"

	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore"
	idem "github.com/idemkit/idemkit/core"
)

// ErrorHandler returns an error handler for fiber.Config.ErrorHandler that
// answers a body over Fiber's own limit (fiber.Config.BodyLimit, 4 MiB by
// default) with e's 413 payload-too-large problem, the one idemkit answers
// for a body over idem.Config.MaxRequestBody. fasthttp enforces Fiber's
// limit while reading the request, before any middleware runs, and reports
// it to the app's error handler as fiber.ErrRequestEntityTooLarge; Fiber's
// default handler would answer it with a plain-text 413. Every other error
// goes to next, or to fiber.DefaultErrorHandler if next is nil.
//
//	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(engine, nil)})
//
// The middleware renders a handler's errors with the app's error handler
// too, so a handler returning fiber.ErrRequestEntityTooLarge gets the same
// problem; an error of its own with status 413 (fiber.NewError) goes to next.
func ErrorHandler(e *idem.Engine, next fiber.ErrorHandler) fiber.ErrorHandler {
	return fasthttpcore.ErrorHandler(e, &fiberV3, next)
}
