module github.com/idemkit/idemkit

go 1.26
