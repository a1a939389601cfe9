package jsonrpc

// Test-only access, from package jsonrpc_test, to the reference copy of the
// previous implementation (reference_test.go).
var (
	ReferenceParse        = referenceParse
	ReferenceIsJSONObject = referenceIsJSONObject
)
