#!/usr/bin/perl
# Sends one D-Bus signal addressed to DEST whose body is a byte array (`ay`) of SIZE
# zero bytes, as the user running it: the oversized forgery of litelet's D-Bus tests
# (tests/fakes/dbus.rs against a private dbus-daemon, and the VM tier on the system bus).
# Perl because perl-base is on every Debian host, the VM image included, and
# dbus-send cannot take a 32 MiB argument.
# Usage: forge-signal.pl SOCKET_PATH DEST PATH INTERFACE MEMBER SIZE
use strict;
use warnings;
use IO::Socket::UNIX;
use Socket qw(SOCK_STREAM);

my ($socket, $dest, $path, $interface, $member, $size) = @ARGV;
die "usage: forge-signal.pl SOCKET_PATH DEST PATH INTERFACE MEMBER SIZE\n"
  unless defined $size;

my $bus = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $socket)
  or die "connect $socket: $!\n";
binmode $bus;
$bus->autoflush(1);

# SASL EXTERNAL with our own uid, in hex of its decimal digits.
print $bus "\0AUTH EXTERNAL " . unpack('H*', "$<") . "\r\n";
my $answer = <$bus>;
die "authentication refused: $answer" unless defined $answer && $answer =~ /^OK /;
print $bus "BEGIN\r\n";

# Zero bytes up to the next multiple of $n (offsets count from the message start;
# the header fields start at 16, so their own offsets align the same way).
sub pad {
    my ($buf, $n) = @_;
    $$buf .= "\0" x ((-length $$buf) % $n);
}

# One little-endian message: type, serial, header fields [code, type, value], body.
sub message {
    my ($type, $serial, $fields, $body) = @_;
    my $f = '';
    for my $field (@$fields) {
        my ($code, $t, $v) = @$field;
        pad(\$f, 8);
        $f .= pack('C C a1 x', $code, 1, $t);    # code, variant signature "t"
        if ($t eq 'g') {
            $f .= pack('C', length $v) . $v . "\0";
        } else {
            $f .= pack('V', length $v) . $v . "\0";
        }
    }
    my $m = pack('a1 C C C V V V', 'l', $type, 0, 1, length $body, $serial, length $f) . $f;
    pad(\$m, 8);
    return $m . $body;
}

my $bus_name = 'org.freedesktop.DBus';
print $bus message(1, 1, [[1, 'o', '/org/freedesktop/DBus'], [2, 's', $bus_name],
                          [3, 's', 'Hello'], [6, 's', $bus_name]], '');
print $bus message(4, 2, [[1, 'o', $path], [2, 's', $interface], [3, 's', $member],
                          [6, 's', $dest], [8, 'g', 'ay']],
                   pack('V', $size) . ("\0" x $size));
# A call after the signal: its reply says the bus took the signal (it drops a
# connection that sends a message over its limit, and answers in order).
print $bus message(1, 3, [[1, 'o', '/org/freedesktop/DBus'], [2, 's', $bus_name],
                          [3, 's', 'GetId'], [6, 's', $bus_name]], '');
my ($in, $returns) = ('', 0);
while ($returns < 2) {
    if (length $in >= 16) {
        my (undef, $type, undef, undef, $body_len, undef, $fields_len) =
          unpack('a1 C C C V V V', $in);
        my $len = 16 + $fields_len + ((-(16 + $fields_len)) % 8) + $body_len;
        if (length $in >= $len) {
            die "the bus answered with an error\n" if $type == 3;
            $returns++ if $type == 2;
            substr($in, 0, $len) = '';
            next;
        }
    }
    sysread($bus, $in, 65536, length $in) or die "the bus closed the connection\n";
}
close $bus;
