package idem

import (
	"runtime"
	"strings"
)

// A timeout middleware that runs the handler on a goroutine of its own and
// answers for it when time is up (http.TimeoutHandler, Echo's Timeout,
// which is built on it, gin-contrib/timeout) lets the request end while the
// handler goes on running. Registered inside idemkit, its answer reaches
// the adapter as an ordinary response, and releasing the key for it (it is
// never storable: 503, 408) would let a retry run beside the handler.
//
// Such an answer is told from the handler's own by who writes its status:
// the middleware's own code is on the stack when it does, whatever message
// or status it was configured with. The stack is only looked at for a
// status that would release the key, so stored responses cost nothing.

// timeoutMiddlewares are the functions, or the packages (ending in '.'),
// whose code writes a timeout middleware's answer.
var timeoutMiddlewares = []string{
	"net/http.(*timeoutHandler).ServeHTTP",
	"github.com/gin-contrib/timeout.",
}

// timeoutMiddlewareWriting returns the name of the timeout middleware
// whose code is on the calling goroutine's stack, or "".
func timeoutMiddlewareWriting() string {
	var pcs [64]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		for _, m := range timeoutMiddlewares {
			if f.Function == m || strings.HasSuffix(m, ".") && strings.HasPrefix(f.Function, m) {
				return m
			}
		}
		if !more {
			return ""
		}
	}
}

// WritingStatus tells the Lock that the response is being given this
// status. An adapter built on net/http calls it from its response writer's
// WriteHeader, on the goroutine that writes the status, before passing the
// call on. For a status that is not stored it notes whether a timeout
// middleware registered inside idemkit is answering while the handler may
// still run: FinishHTTP then leaves the key locked until its lease runs out
// instead of releasing it (see HandlerMayRun).
func (l *Lock) WritingStatus(code int) {
	if storable(code) || l.timeoutInside != "" {
		return
	}
	l.timeoutInside = timeoutMiddlewareWriting()
}
