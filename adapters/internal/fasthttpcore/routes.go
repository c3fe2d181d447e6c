package fasthttpcore

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Routes is what the middleware reads of an app's routes to tell whether a
// request matches one.
type Routes struct {
	Routes        []Route // the app's routes that are not middleware (App.GetRoutes(true))
	CaseSensitive bool    // fiber.Config.CaseSensitive
	StrictRouting bool    // fiber.Config.StrictRouting
	// Match reports whether path matches the pattern of a route with
	// parameters or wildcards: fiber.RoutePatternMatch, with the app's
	// configuration.
	Match func(path, pattern string) bool
}

// Route is one route of an app.
type Route struct{ Method, Path string }

// routes tells whether a request matches a route of the app, for middleware
// registered with app.Use, which Fiber also runs for requests that match
// none (their 404 or 405 is not guarded). It is built from the app's routes
// on first use and again whenever routes were added since.
type routes[C Ctx] struct {
	f       *Framework[C]
	mu      sync.Mutex
	handled atomic.Uint32 // f.Handlers when the table was built
	table   atomic.Pointer[routeTable]
}

type routeTable struct {
	static  map[string]map[string]bool // method -> paths of routes without parameters
	dynamic map[string][]string        // method -> patterns with parameters or wildcards
	Routes
}

// match reports whether c's method and path match a route that is not
// middleware.
func (rs *routes[C]) match(c C) bool {
	t := rs.table.Load()
	if t == nil || rs.handled.Load() != rs.f.Handlers(c) {
		t = rs.build(c)
	}
	path := t.normal(c.Path())
	method := c.Method()
	if t.static[method][path] {
		return true
	}
	for _, pattern := range t.dynamic[method] {
		if t.Match(c.Path(), pattern) {
			return true
		}
	}
	return false
}

// normal is path as the app compares paths: in lower case unless the app
// is case sensitive, and without a trailing slash unless its routing is
// strict.
func (t *routeTable) normal(path string) string {
	if !t.CaseSensitive {
		path = strings.ToLower(path)
	}
	if !t.StrictRouting && len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	return path
}

func (rs *routes[C]) build(c C) *routeTable {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	count := rs.f.Handlers(c)
	if t := rs.table.Load(); t != nil && rs.handled.Load() == count {
		return t
	}
	t := &routeTable{static: map[string]map[string]bool{}, dynamic: map[string][]string{}, Routes: rs.f.Routes(c)}
	for _, r := range t.Routes.Routes {
		if strings.ContainsAny(r.Path, ":*+") {
			t.dynamic[r.Method] = append(t.dynamic[r.Method], r.Path)
			continue
		}
		if t.static[r.Method] == nil {
			t.static[r.Method] = map[string]bool{}
		}
		t.static[r.Method][t.normal(r.Path)] = true
	}
	rs.table.Store(t)
	rs.handled.Store(count)
	return t
}
