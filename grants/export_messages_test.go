package grants

import "strings"

// FailForTest is fail, for package grants_test.
var FailForTest = fail

// AcceptedForTest is c as the verifier returns accepted claims: with the
// scope string joined and HeaderSafe found once (Verifier.verify), for
// package grants_test.
func AcceptedForTest(c *Claims) *Claims {
	c.scopeString = strings.Join(c.Scopes, " ")
	c.headerSafe = headerSafeClaims(c)
	return c
}
