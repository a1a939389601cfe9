package jsonrpc

// ParseSlow is parseSlow (Parse check by check), for the differential tests
// of package jsonrpc_test (onepass_test.go).
var ParseSlow = parseSlow
