package grants

// FailForTest is fail, for package grants_test.
var FailForTest = fail
