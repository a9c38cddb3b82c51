// Package sdkcheck tests vllmsim with the official OpenAI Go SDK. It is a
// package of its own so that fuzzing vllmsim does not compile the (large)
// SDK with coverage instrumentation.
package sdkcheck
