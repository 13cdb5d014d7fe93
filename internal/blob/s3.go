package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// s3Store keeps objects in a bucket under a key prefix, through any S3 API. Addressing is
// path-style and request checksums are computed only when an operation requires them: S3 servers
// other than AWS reject the newer SDK defaults.
type s3Store struct {
	client   *s3.Client
	bucket   string
	prefix   string // "" or ending in "/"
	endpoint string
	region   string
}

// openTimeout bounds the bucket check at start: a store that does not answer is an error, never
// a hang.
const openTimeout = 15 * time.Second

// openS3 opens s3://BUCKET/PREFIX?endpoint=URL&region=R. Credentials come from the standard
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), never from the URL,
// so the URL is safe to log. The bucket is created when missing (if the credentials allow it).
func openS3(ctx context.Context, u *url.URL) (Store, error) {
	if u.User != nil {
		return nil, errdefs.Invalidf("s3 blob store URL: put credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, not in the URL")
	}
	bucket := u.Host
	if bucket == "" {
		return nil, errdefs.Invalidf("s3 blob store URL names no bucket: s3://BUCKET/PREFIX?endpoint=URL&region=R")
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := ValidKey(prefix); err != nil {
			return nil, errdefs.Invalidf("s3 blob store URL: prefix %q: %v", prefix, err)
		}
		prefix += "/"
	}
	q := u.Query()
	for k := range q {
		if k != "endpoint" && k != "region" {
			return nil, errdefs.Invalidf("s3 blob store URL: unknown parameter %q (endpoint, region)", k)
		}
	}
	endpoint, region := q.Get("endpoint"), q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	if endpoint != "" {
		eu, err := url.Parse(endpoint)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return nil, errdefs.Invalidf("s3 blob store URL: endpoint %q is not an http(s) URL", endpoint)
		}
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || secret == "" {
		return nil, errdefs.Invalidf("s3 blob store %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", u.Redacted())
	}
	cfg := aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(id, secret, os.Getenv("AWS_SESSION_TOKEN")),
		HTTPClient:  awshttp.NewBuildableClient().WithTimeout(5 * time.Minute),
		// S3 servers other than AWS reject the checksum headers newer SDKs add by default.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = true
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	s := &s3Store{client: client, bucket: bucket, prefix: prefix, endpoint: endpoint, region: region}
	cctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if err := s.ensureBucket(cctx); err != nil {
		return nil, fmt.Errorf("s3 blob store %s: %w", s, err)
	}
	return s, nil
}

func (s *s3Store) String() string {
	name := "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/") + "?"
	if s.endpoint != "" {
		name += "endpoint=" + s.endpoint + "&"
	}
	return name + "region=" + s.region
}

func (s *s3Store) ensureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err == nil {
		return nil
	}
	switch status(err) {
	case http.StatusNotFound:
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("the server refused the credentials or the region (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and region=): %w", describe(err))
	default:
		return describe(err)
	}
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.bucket}); err != nil {
		var owned interface{ ErrorCode() string }
		if errors.As(err, &owned) && owned.ErrorCode() == "BucketAlreadyOwnedByYou" {
			return nil // created meanwhile by another server or agent
		}
		return fmt.Errorf("bucket %s does not exist and could not be created: %w", s.bucket, describe(err))
	}
	return nil
}

func (s *s3Store) key(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

func (s *s3Store) Put(ctx context.Context, key string, body io.ReadSeeker) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	size, err := body.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &k, Body: body, ContentLength: &size})
	return s.wrap(key, err)
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.get(ctx, key, nil)
}

func (s *s3Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 || length < 0 {
		return nil, errdefs.Invalidf("blob %s: range %d+%d is negative", key, offset, length)
	}
	if length == 0 {
		// HTTP cannot ask for zero bytes; check the object exists and answer nothing.
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	r := fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	rc, err := s.get(ctx, key, &r)
	if status(err) == http.StatusRequestedRangeNotSatisfiable {
		return io.NopCloser(strings.NewReader("")), nil // offset at or past the end
	}
	return rc, err
}

func (s *s3Store) get(ctx context.Context, key string, rng *string) (io.ReadCloser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &k, Range: rng})
	if err != nil {
		if status(err) == http.StatusRequestedRangeNotSatisfiable {
			return nil, err
		}
		return nil, s.wrap(key, err)
	}
	return out.Body, nil
}

func (s *s3Store) Stat(ctx context.Context, key string) (Info, error) {
	k, err := s.key(key)
	if err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return Info{}, s.wrap(key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	p := s.prefix + prefix
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &p})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return s.wrap(prefix, err)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if err := fn(Info{Key: key, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &k})
	if status(err) == http.StatusNotFound {
		return nil
	}
	return s.wrap(key, err)
}

// wrap turns an S3 answer into an error of ours: a missing object is NotFound naming the key;
// anything else says which store and key failed, with the server's code and message.
func (s *s3Store) wrap(key string, err error) error {
	if err == nil {
		return nil
	}
	if status(err) == http.StatusNotFound {
		return notFound(key)
	}
	return fmt.Errorf("s3 blob store %s: %s: %w", s, key, describe(err))
}

// status is the HTTP status of an S3 answer, or 0.
func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// describe shortens the SDK's error chain to what an operator acts on: the server's code and
// message, or the transport's error (endpoint unreachable, timeout).
func describe(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		msg := ae.ErrorMessage()
		if msg == "" { // HEAD answers carry no body
			msg = http.StatusText(status(err))
		}
		return errdefs.New(errdefs.Unavailable, "%s: %s", ae.ErrorCode(), msg)
	}
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		return errdefs.New(errdefs.Unavailable, "%s: %v", oe.Operation(), oe.Err)
	}
	return err
}
