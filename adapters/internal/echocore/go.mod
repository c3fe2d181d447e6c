module github.com/idemkit/idemkit/adapters/internal/echocore

go 1.26

require github.com/idemkit/idemkit v0.0.0

replace github.com/idemkit/idemkit => ../../..
