module github.com/idemkit/idemkit/adapters/echov5

go 1.26

require (
	github.com/idemkit/idemkit v0.0.0
	github.com/idemkit/idemkit/adapters/internal/echocore v0.0.0
	github.com/labstack/echo/v5 v5.4.4
)

require golang.org/x/time v0.15.0 // indirect

replace (
	github.com/idemkit/idemkit => ../..
	github.com/idemkit/idemkit/adapters/internal/echocore => ../internal/echocore
)
