// Package topics is agentsilo's publish/subscribe: topics with wildcard
// subscriptions, durable named subscriptions, acknowledged delivery with
// retries and dead letters.
package topics
