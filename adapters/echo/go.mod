module github.com/idemkit/idemkit/adapters/echo

go 1.26

require (
	github.com/idemkit/idemkit v0.0.0
	github.com/idemkit/idemkit/adapters/internal/echocore v0.0.0
	github.com/labstack/echo/v4 v4.16.0
)

require (
	github.com/labstack/gommon v0.5.0 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)

replace (
	github.com/idemkit/idemkit => ../..
	github.com/idemkit/idemkit/adapters/internal/echocore => ../internal/echocore
)
