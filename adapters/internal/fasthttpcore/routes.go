package fasthttpcore

import (
	"strings"
	"sync"
	"sync/atomic"
)

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
	static        map[string]map[string]bool // method -> paths of routes without parameters
	dynamic       map[string][]string        // method -> patterns with parameters or wildcards
	caseSensitive bool
	strict        bool
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
		if rs.f.Match(c.Path(), pattern, t.caseSensitive, t.strict) {
			return true
		}
	}
	return false
}

// normal is path as the app compares paths: in lower case unless the app
// is case sensitive, and without a trailing slash unless its routing is
// strict.
func (t *routeTable) normal(path string) string {
	if !t.caseSensitive {
		path = strings.ToLower(path)
	}
	if !t.strict && len(path) > 1 {
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
	t := &routeTable{static: map[string]map[string]bool{}, dynamic: map[string][]string{}}
	t.caseSensitive, t.strict = rs.f.Routing(c)
	rs.f.Routes(c, func(method, path string) {
		if strings.ContainsAny(path, ":*+") {
			t.dynamic[method] = append(t.dynamic[method], path)
			return
		}
		if t.static[method] == nil {
			t.static[method] = map[string]bool{}
		}
		t.static[method][t.normal(path)] = true
	})
	rs.table.Store(t)
	rs.handled.Store(count)
	return t
}
